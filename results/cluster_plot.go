package results

import (
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ClusterSizeFile is the cluster's size (GPUs up) and the GPUs in use over
// time, written by WritePlots when a run was autoscaled.
const ClusterSizeFile = "cluster-size.png"

// clusterSizePlot draws, per run, the GPUs up (solid) and in use (dashed)
// against time in hours.
func clusterSizePlot(runs []Run, title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = "Cluster size: " + title
	p.X.Label.Text = "time (h)"
	p.Y.Label.Text = "GPUs"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	peak := 0
	for i, r := range runs {
		if len(r.Timeline) == 0 {
			continue
		}
		up := make(plotter.XYs, len(r.Timeline))
		use := make(plotter.XYs, len(r.Timeline))
		for k, s := range r.Timeline {
			up[k] = plotter.XY{X: s.Time / 3600, Y: float64(s.GPUsUp)}
			use[k] = plotter.XY{X: s.Time / 3600, Y: float64(s.GPUsInUse)}
			peak = max(peak, s.GPUsUp, s.GPUsInUse)
		}
		for j, pts := range []plotter.XYs{up, use} {
			l, err := plotter.NewLine(pts)
			if err != nil {
				continue // non-finite times: leave the run out
			}
			l.StepStyle = plotter.PostStep
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.2)
			label := runLabel(runs, i) + " up"
			if j == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
				l.Width = vg.Points(0.8)
				label = runLabel(runs, i) + " in use"
			}
			p.Add(l)
			p.Legend.Add(label, l)
		}
	}
	p.Y.Max = math.Max(float64(peak)*1.3, 1)
	return p
}
