package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"testing"
)

// referenceFits are the artifact's offline fits on all rows of each
// placements.csv (pollux-reference.md §1).
var referenceFits = map[string]PerfParams{
	"bert":        {0.1692, 0.0586, 1.352, 0.01424, 0.2871, 0.0112, 1.90},
	"cifar10":     {0.01733, 7.018e-4, 0.1211, 0.002393, 0.03161, 0.001012, 1.999},
	"ncf":         {0.006924, 6.322e-7, 0.01817, 4.277e-4, 0.006192, 1.517e-4, 1.226},
	"imagenet":    {0.06454, 0.004474, 0.299, 0.005553, 1.57e-4, 1e-8, 2.489},
	"deepspeech2": {0.3041, 0.02423, 0.3778, 0.0285, 0.08692, 0.001856, 1.432},
	"yolov3":      {0.1827, 0.02595, 0.699, 0.02336, 0.139, 0.02148, 1.163},
}

// TestFitMatchesReferenceValues fits all rows of each application's
// placements.csv at once, as the reference fits were made, and compares
// the predicted step times with those of the reference parameters at every
// configuration of the trace. The fit must reach the reference's loss
// (within 1e−4) and predict within 10% everywhere; the differences are
// logged.
func TestFitMatchesReferenceValues(t *testing.T) {
	const maxDiff = 0.10
	for _, app := range apps {
		t.Run(app, func(t *testing.T) {
			rows := readPlacements(t, app)
			pts := allPoints(rows)
			got, err := FitPerfParams(pts)
			if err != nil {
				t.Fatalf("FitPerfParams: %v", err)
			}
			want := referenceFits[app]
			prob := newFitProblem(pts)
			lossGot, lossWant := prob.lossOf(got), prob.lossOf(want)
			if lossGot > lossWant+1e-4 {
				t.Errorf("loss %.5f, want at most the reference's %.5f", lossGot, lossWant)
			}
			var sumDiff, worst float64
			for _, p := range pts {
				g := got.OptimStepTime(p.Nodes, p.Replicas, p.LocalBsz)
				w := want.OptimStepTime(p.Nodes, p.Replicas, p.LocalBsz)
				d := math.Abs(g/w - 1)
				sumDiff += d
				worst = math.Max(worst, d)
			}
			t.Logf("loss %.5f (reference %.5f); optim-step time vs reference: mean |diff| %.2f%%, max %.2f%%\n  got  %+.4g\n  want %+.4g",
				lossGot, lossWant, 100*sumDiff/float64(len(pts)), 100*worst, got, want)
			if worst > maxDiff {
				t.Errorf("predictions differ from the reference fit's by up to %.1f%%, want at most %.0f%%", 100*worst, 100*maxDiff)
			}
		})
	}
}

// heldOutMAPE is the mean absolute percentage error of the optimizer-step
// time that p predicts for the rows.
func heldOutMAPE(p PerfParams, rows []traceRow) float64 {
	sum := 0.0
	for _, r := range rows {
		sum += math.Abs(p.OptimStepTime(r.nodes, r.replicas, r.localBsz)/r.stepTime - 1)
	}
	return 100 * sum / float64(len(rows))
}

// lossOf is the fitting loss at p.
func (f *fitProblem) lossOf(p PerfParams) float64 {
	theta := [numParams]float64{p.AlphaC, p.BetaC, p.AlphaN, p.BetaN, p.AlphaR, p.BetaR, p.Gamma}
	var grad [numParams]float64
	return f.loss(&theta, &grad)
}

// TestModelAccuracy fits each application on part of its placements, one
// point per distinct (N, K, m) as the artifact simulator records them, and
// measures the error of the predicted optimizer-step time on the other
// placements' rows (mean absolute percentage error). Two splits: the
// placements with at most 8 GPUs predict those with more (extrapolation,
// what a growing job needs), and a fixed pseudo-random 70% of placements
// predicts the rest. For the first split the artifact's own fit of the same
// points (testdata/artifact-golden.json) must do no better by more than
// one percentage point: the model's error, not the fit's.
func TestModelAccuracy(t *testing.T) {
	artifact := map[string]PerfParams{}
	for _, gf := range readGolden(t).Fits {
		if gf.Kind == "at-most-8-gpus" {
			artifact[gf.App] = paramsOf(gf.Params)
		}
	}
	splits := map[string]struct {
		train    func(traceRow) bool
		bound    float64 // on the MAPE, in percent
		artifact map[string]PerfParams
	}{
		"at most 8 GPUs predict more": {
			train:    func(r traceRow) bool { return r.replicas <= 8 },
			bound:    30,
			artifact: artifact,
		},
		"70% of placements predict 30%": {
			train: func(r traceRow) bool {
				h := fnv.New32a()
				h.Write([]byte(r.placement))
				return h.Sum32()%10 < 7
			},
			bound: 12,
		},
	}
	for name, split := range splits {
		t.Run(name, func(t *testing.T) {
			for _, app := range apps {
				rows := readPlacements(t, app)
				var train, test []traceRow
				for _, r := range rows {
					if split.train(r) {
						train = append(train, r)
					} else {
						test = append(test, r)
					}
				}
				p, err := FitPerfParams(firstPoints(train))
				if err != nil {
					t.Fatalf("%s: FitPerfParams: %v", app, err)
				}
				mape := heldOutMAPE(p, test)
				msg := fmt.Sprintf("%-11s train %4d rows, test %4d rows: MAPE %5.1f%% (reference full-data fit: %5.1f%%",
					app, len(train), len(test), mape, heldOutMAPE(referenceFits[app], test))
				if a, ok := split.artifact[app]; ok {
					ma := heldOutMAPE(a, test)
					msg += fmt.Sprintf("; artifact fit of the same points: %5.1f%%", ma)
					if mape > ma+1 {
						t.Errorf("%s: MAPE %.1f%%, above the artifact fit's %.1f%% by more than 1 point", app, mape, ma)
					}
				}
				t.Log(msg + ")")
				if !(mape < split.bound) {
					t.Errorf("%s: MAPE %.1f%%, want below %.0f%%", app, mape, split.bound)
				}
			}
		})
	}
}
