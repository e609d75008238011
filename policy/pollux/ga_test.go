package pollux

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
)

// Internal tests of the genetic algorithm and of the Pollux operators.
// They cannot use policytest (it imports this package), so they build
// their inputs by hand.

// gaTestModel is an Amdahl-style goodput model for internal tests.
type gaTestModel struct{ serial, comm float64 }

func (m gaTestModel) Goodput(nodes, replicas int) float64 {
	if replicas <= 0 {
		return 0
	}
	t := m.serial + 1/float64(replicas) + m.comm*float64(nodes-1)
	return 1 / t
}

// gaTestInput draws a random input with assorted nodes, jobs and a current
// allocation that may be anything (over capacity, over bounds).
func gaTestInput(rng *rand.Rand) policy.Input {
	in := policy.Input{Now: 1e4, Current: policy.Allocations{}}
	for i := range 1 + rng.IntN(12) {
		in.Nodes = append(in.Nodes, policy.Node{ID: fmt.Sprintf("n%02d", i), GPUs: rng.IntN(9)})
	}
	for i := range 1 + rng.IntN(20) {
		lo := rng.IntN(4)
		j := policy.Job{
			ID:              fmt.Sprintf("j%02d", i),
			Submitted:       float64(rng.IntN(100)),
			AttainedService: float64(rng.IntN(4)),
			MinReplicas:     lo,
			MaxReplicas:     max(lo, 1) + rng.IntN(16),
			NumRestarts:     rng.IntN(3),
		}
		j.Age = in.Now - j.Submitted
		if rng.IntN(3) > 0 {
			j.Goodput = gaTestModel{serial: rng.Float64() * 0.3, comm: rng.Float64() * 0.3}
		}
		in.Jobs = append(in.Jobs, j)
		if rng.IntN(2) == 0 {
			var a []string
			for range rng.IntN(10) {
				a = append(a, in.Nodes[rng.IntN(len(in.Nodes))].ID)
			}
			in.Current[j.ID] = a
		}
	}
	return in
}

// gaTestProblem sets up a problem for in (which must have GPUs).
func gaTestProblem(t *testing.T, in policy.Input, cfg Config) *polluxProblem {
	t.Helper()
	total := 0
	for _, n := range in.Nodes {
		total += n.GPUs
	}
	if total == 0 {
		t.Fatal("test input has no GPUs")
	}
	pr := &polluxProblem{}
	pr.setup(in, polluxJobOrder(in.Jobs), total, cfg.Resolve(policy.RegimeOf(in.Nodes)))
	return pr
}

// denseBase returns the current allocation as a dense rows × cols matrix.
func denseBase(pr *polluxProblem) []uint8 { return pr.base.dense(pr.rows, pr.cols) }

// denseRepairEval runs repairEval on a dense rows × cols matrix, in place.
func denseRepairEval(pr *polluxProblem, rng *rand.Rand, x []uint8) (float64, float64, uint64) {
	pr.ensure(1)
	pr.states[0].setDense(x, pr.rows, pr.cols)
	f0, f1, h := pr.repairEval(rng, 0)
	copy(x, pr.states[0].dense(pr.rows, pr.cols))
	return f0, f1, h
}

// denseMutate runs mutate on a dense rows × cols matrix, in place.
func denseMutate(pr *polluxProblem, rng *rand.Rand, x []uint8) {
	pr.ensure(1)
	pr.states[0].setDense(x, pr.rows, pr.cols)
	pr.mutate(rng, 0)
	copy(x, pr.states[0].dense(pr.rows, pr.cols))
}

// checkState verifies the invariants of a repaired state and returns the
// first violation.
func checkState(pr *polluxProblem, x []uint8) error {
	used := make([]int, pr.cols)
	distOn := make([]int, pr.cols)
	for j := range pr.rows {
		row := x[j*pr.cols : (j+1)*pr.cols]
		sum, nz := 0, 0
		for n, v := range row[:pr.cols] {
			used[n] += int(v)
			sum += int(v)
			if v != 0 {
				nz++
			}
		}
		if sum != 0 && (sum < int(pr.minRep[j]) || sum > int(pr.maxRep[j])) {
			return fmt.Errorf("row %d: %d GPUs outside [%d, %d]", j, sum, pr.minRep[j], pr.maxRep[j])
		}
		if nz > int(pr.maxNodes) {
			return fmt.Errorf("row %d: %d nodes, max %d", j, nz, pr.maxNodes)
		}
		if nz > 1 {
			for n, v := range row[:pr.cols] {
				if v != 0 {
					distOn[n]++
				}
			}
		}
	}
	for n := range pr.cols {
		if used[n] > int(pr.capacity[n]) {
			return fmt.Errorf("node %d: %d GPUs used, capacity %d", n, used[n], pr.capacity[n])
		}
		if pr.avoid && distOn[n] > 1 {
			return fmt.Errorf("node %d: %d distributed jobs", n, distOn[n])
		}
	}
	return nil
}

// naiveObjectives evaluates a repaired state straight from the artifact's
// formulas (pollux.py _evaluate, get_cluster_utilities).
func naiveObjectives(pr *polluxProblem, x []uint8) (float64, float64) {
	var sumP, util, wsum float64
	colsum := make([]int, pr.cols)
	for j := range pr.rows {
		row := x[j*pr.cols : (j+1)*pr.cols]
		k, nn := 0, 0
		for n, v := range row {
			k += int(v)
			colsum[n] += int(v)
			if v != 0 {
				nn++
			}
		}
		s := 0.0
		if k > 0 {
			s = pr.speedup(pr.workers[0], j, 0, int32(nn), int32(k))
		}
		util += s
		scaled := s * pr.scale
		if base := denseBase(pr)[j*pr.cols : (j+1)*pr.cols]; !slices.Equal(row, base) {
			held := 0
			for _, v := range base {
				held += int(v)
			}
			if k > held {
				scaled *= pr.growFactor[j]
			} else {
				scaled *= pr.factor[j]
			}
		}
		sumP += pr.w(j) * math.Pow(scaled+1e-3, pr.p)
		wsum += pr.w(j)
	}
	fit := math.Pow(sumP/wsum, 1/pr.p)
	occ := 0
	for n, c := range colsum {
		if c > 0 {
			occ += int(pr.capacity[n])
		}
	}
	u := 0.0
	if occ > 0 {
		u = util / float64(occ)
	}
	return -fit, -u
}

// naiveRepairNoTrim applies the artifact's repair steps (a), (d) and (e)
// in its own cumulative-sum form, for states where (b) and (c) do nothing.
func naiveRepairNoTrim(pr *polluxProblem, x []uint8) {
	rows, cols, stride := pr.rows, pr.cols, pr.cols
	if pr.avoid {
		dist := make([]bool, rows)
		for j := range rows {
			nz := 0
			for n := range cols {
				if x[j*stride+n] != 0 {
					nz++
				}
			}
			dist[j] = nz > 1
		}
		for n := range cols {
			cum := 0
			for j := range rows {
				if dist[j] && x[j*stride+n] > 0 {
					cum++
				}
				if cum > 1 {
					x[j*stride+n] = 0
				}
			}
		}
	}
	for n := range cols {
		prev := 0
		cum := 0
		for j := range rows {
			cum += int(x[j*stride+n])
			c := min(cum, int(pr.capacity[n]))
			x[j*stride+n] = uint8(c - prev)
			prev = c
		}
	}
	for j := range rows {
		sum := 0
		for n := range cols {
			sum += int(x[j*stride+n])
		}
		if sum < int(pr.minRep[j]) {
			clear(x[j*stride : j*stride+cols])
		}
	}
}

func TestGaSkipFrequency(t *testing.T) {
	tests := map[string]struct {
		p float64
	}{
		"p=0.1":  {p: 0.1},
		"p=0.02": {p: 0.02},
		"p=0.5":  {p: 0.5},
		"p=1":    {p: 1},
		"p=0":    {p: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			const n = 200000
			sc := gaSkipScale(tc.p)
			hits := 0
			for i := gaSkip(rng, sc); i < n; i += 1 + gaSkip(rng, sc) {
				hits++
			}
			got := float64(hits) / n
			// Binomial standard error at n = 2e5 is below 0.0012; allow 5 σ.
			if math.Abs(got-tc.p) > 0.006 {
				t.Errorf("hit frequency %.4f, want %.4f ± 0.006", got, tc.p)
			}
		})
	}
}

// naiveFronts ranks points by repeated extraction of the non-dominated set.
func naiveFronts(f0, f1 []float64) []int32 {
	n := len(f0)
	rank := make([]int32, n)
	for i := range rank {
		rank[i] = -1
	}
	for k := int32(0); ; k++ {
		var cur []int
		for i := range n {
			if rank[i] >= 0 {
				continue
			}
			dominated := false
			for j := range n {
				if j == i || rank[j] >= 0 {
					continue
				}
				if f0[j] <= f0[i] && f1[j] <= f1[i] && (f0[j] < f0[i] || f1[j] < f1[i]) {
					dominated = true
					break
				}
			}
			if !dominated {
				cur = append(cur, i)
			}
		}
		if len(cur) == 0 {
			return rank
		}
		for _, i := range cur {
			rank[i] = k
		}
	}
}

func TestGaSurviveRanksLikeNaiveSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 300 {
		n := 1 + rng.IntN(60)
		e := &gaEngine{}
		e.reset(gaParams{popSize: n, rows: 1}, nil, n)
		f0 := make([]float64, n)
		f1 := make([]float64, n)
		for i := range n {
			s := e.alloc()
			// Few distinct values so that ties and duplicates are common.
			f0[i] = float64(rng.IntN(6))
			f1[i] = float64(rng.IntN(6))
			e.f0[s], e.f1[s] = f0[i], f1[i]
			e.pop = append(e.pop, s)
		}
		slots := slices.Clone(e.pop)
		e.survive(rng, n)
		want := naiveFronts(f0, f1)
		got := make([]int32, n)
		for i, s := range slots {
			got[i] = e.rank[s]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("trial %d: ranks differ (-want +got):\n%s", trial, diff)
		}
	}
}

func TestGaSurviveKeepsBestFronts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, keep = 40, 10
	for trial := range 50 {
		e := &gaEngine{}
		e.reset(gaParams{popSize: keep, rows: 1}, nil, n)
		f0, f1 := make([]float64, n), make([]float64, n)
		for i := range n {
			s := e.alloc()
			f0[i], f1[i] = float64(rng.IntN(10)), float64(rng.IntN(10))
			e.f0[s], e.f1[s] = f0[i], f1[i]
			e.pop = append(e.pop, s)
		}
		slots := slices.Clone(e.pop)
		e.survive(rng, keep)
		if len(e.pop) != keep {
			t.Fatalf("trial %d: survivors = %d, want %d", trial, len(e.pop), keep)
		}
		rank := naiveFronts(f0, f1)
		survived := map[int32]bool{}
		worst := int32(0)
		for _, s := range e.pop {
			survived[s] = true
			worst = max(worst, e.rank[s])
		}
		for i, s := range slots {
			if rank[i] < worst && !survived[s] {
				t.Fatalf("trial %d: a point of rank %d was dropped while rank %d survived", trial, rank[i], worst)
			}
		}
		if got, want := len(e.free), 2*keep+2+n-keep; got != want {
			t.Fatalf("trial %d: free slots = %d, want %d", trial, got, want)
		}
	}
}

func TestGaCrowding(t *testing.T) {
	tests := map[string]struct {
		f0, f1 []float64 // one front, in lexicographic order
		want   []float64
	}{
		"two points": {
			f0: []float64{0, 1}, f1: []float64{1, 0},
			want: []float64{gaCrowdingInf, gaCrowdingInf},
		},
		"four points": {
			// Gaps: f0 range 3, f1 range 3.
			f0: []float64{0, 1, 2, 3}, f1: []float64{3, 2, 1, 0},
			want: []float64{gaCrowdingInf, (2.0/3 + 2.0/3) / 2, (2.0/3 + 2.0/3) / 2, gaCrowdingInf},
		},
		"uneven": {
			f0: []float64{0, 1, 4}, f1: []float64{2, 1, 0},
			want: []float64{gaCrowdingInf, (4.0/4 + 2.0/2) / 2, gaCrowdingInf},
		},
		"duplicates get zero": {
			f0: []float64{0, 0, 1, 2}, f1: []float64{2, 2, 1, 0},
			want: []float64{gaCrowdingInf, 0, 1, gaCrowdingInf},
		},
		"all equal": {
			f0: []float64{1, 1, 1}, f1: []float64{1, 1, 1},
			want: []float64{0, 0, 0},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := &gaEngine{}
			e.reset(gaParams{popSize: len(tc.f0), rows: 1}, nil, len(tc.f0))
			var members []int32
			for i := range tc.f0 {
				s := e.alloc()
				e.f0[s], e.f1[s] = tc.f0[i], tc.f1[i]
				members = append(members, s)
			}
			e.crowding(members)
			got := make([]float64, len(members))
			for i, s := range members {
				got[i] = e.crowd[s]
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
				t.Errorf("crowding (-want +got), tolerance 1e-12:\n%s", diff)
			}
		})
	}
}

// crossDense crosses two dense states through the sparse operator.
func crossDense(pr *polluxProblem, a, b []uint8, cut int) ([]uint8, []uint8) {
	pr.ensure(4)
	pr.states[0].setDense(a, pr.rows, pr.cols)
	pr.states[1].setDense(b, pr.rows, pr.cols)
	pr.crossover(2, 3, 0, 1, cut)
	return pr.states[2].dense(pr.rows, pr.cols), pr.states[3].dense(pr.rows, pr.cols)
}

func TestPolluxOperatorsKeepInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 400 {
		in := gaTestInput(rng)
		total := 0
		for _, n := range in.Nodes {
			total += n.GPUs
		}
		if total == 0 {
			continue
		}
		cfg := Config{DisableInterferenceAvoidance: trial%3 == 0, MaxNodesPerJob: rng.IntN(4)}
		pr := gaTestProblem(t, in, cfg)
		size := pr.rows * pr.cols
		a, b := make([]uint8, size), make([]uint8, size)
		copy(a, denseBase(pr))
		denseRepairEval(pr, rng, a)
		if err := checkState(pr, a); err != nil {
			t.Fatalf("trial %d: repaired base: %v", trial, err)
		}
		denseMutate(pr, rng, b)
		denseRepairEval(pr, rng, b)
		for step := range 20 {
			// Crossover: every child row comes from the parent on its side
			// of the cut.
			point := rng.IntN(pr.rows)
			c0, c1 := crossDense(pr, a, b, point)
			for j := range pr.rows {
				r := func(x []uint8) []uint8 { return x[j*pr.cols : (j+1)*pr.cols] }
				w0, w1 := r(a), r(b)
				if j < point {
					w0, w1 = w1, w0
				}
				if !slices.Equal(r(c0), w0) || !slices.Equal(r(c1), w1) {
					t.Fatalf("trial %d step %d: crossover at %d: row %d not from the right parent", trial, step, point, j)
				}
			}
			// Mutation: entries stay within the node (or current
			// allocation) bound and the padding stays zero.
			denseMutate(pr, rng, c0)
			for j := range pr.rows {
				for n := range pr.cols {
					v := c0[j*pr.cols+n]
					if n >= pr.cols {
						if v != 0 {
							t.Fatalf("trial %d step %d: mutation wrote padding (%d, %d)", trial, step, j, n)
						}
						continue
					}
					if int32(v) > max(pr.capacity[n], int32(denseBase(pr)[j*pr.cols+n])) {
						t.Fatalf("trial %d step %d: mutation set (%d, %d) to %d above capacity %d", trial, step, j, n, v, pr.capacity[n])
					}
				}
			}
			// Repair: all invariants, and the fused evaluation equals the
			// formulas applied afterwards.
			f0, f1, h := denseRepairEval(pr, rng, c0)
			if err := checkState(pr, c0); err != nil {
				t.Fatalf("trial %d step %d: after repair: %v", trial, step, err)
			}
			w0, w1 := naiveObjectives(pr, c0)
			if math.Abs(f0-w0) > 1e-9*math.Abs(w0) || math.Abs(f1-w1) > 1e-9*math.Max(math.Abs(w1), 1) {
				t.Fatalf("trial %d step %d: objectives (%v, %v), formulas give (%v, %v)", trial, step, f0, f1, w0, w1)
			}
			// A repaired state is a fixed point of repair.
			again := slices.Clone(c0)
			_, _, h2 := denseRepairEval(pr, rng, again)
			if !slices.Equal(again, c0) {
				t.Fatalf("trial %d step %d: repair is not idempotent", trial, step)
			}
			if h != h2 {
				t.Fatalf("trial %d step %d: equal states hash to %#x and %#x", trial, step, h, h2)
			}
			a, b = c0, c1
			denseRepairEval(pr, rng, b)
		}
	}
}

func TestPolluxRepairMatchesArtifactCumsum(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 500 {
		in := gaTestInput(rng)
		total := 0
		for i := range in.Jobs {
			// Large caps, so that steps (b) and (c) do nothing.
			in.Jobs[i].MaxReplicas = 1000
		}
		for _, n := range in.Nodes {
			total += n.GPUs
		}
		if total == 0 {
			continue
		}
		pr := gaTestProblem(t, in, Config{DisableInterferenceAvoidance: trial%2 == 0, ArtifactInterferenceQuirk: true, MaxNodesPerJob: 1000})
		x := make([]uint8, pr.rows*pr.cols)
		for j := range pr.rows {
			for n := range pr.cols {
				if rng.IntN(3) == 0 {
					x[j*pr.cols+n] = uint8(rng.IntN(int(pr.capacity[n]) + 2))
				}
			}
		}
		want := slices.Clone(x)
		naiveRepairNoTrim(pr, want)
		denseRepairEval(pr, rng, x)
		if diff := cmp.Diff(want, x); diff != "" {
			t.Fatalf("trial %d: repair differs from the artifact's cumulative sums (-want +got):\n%s", trial, diff)
		}
	}
}

func TestPolluxRepairInterferenceQuirk(t *testing.T) {
	// Three jobs in priority order on two 4-GPU nodes: two distributed
	// jobs, then a single-node job on node 0. The artifact zeroes the
	// second distributed job on both nodes, and (its quirk) also the
	// single-node job ordered after it on node 0.
	in := policy.Input{
		Nodes: []policy.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}},
		Jobs: []policy.Job{
			{ID: "d1", AttainedService: 1, MaxReplicas: 8},
			{ID: "d2", AttainedService: 2, MaxReplicas: 8},
			{ID: "s", AttainedService: 3, MaxReplicas: 8},
		},
	}
	tests := map[string]struct {
		avoid, quirk bool
		want         [][]uint8
	}{
		"artifact mode keeps the quirk":  {avoid: true, quirk: true, want: [][]uint8{{1, 1}, {0, 0}, {0, 0}}},
		"default spares single-node job": {avoid: true, want: [][]uint8{{1, 1}, {0, 0}, {1, 0}}},
		"no avoidance":                   {avoid: false, want: [][]uint8{{1, 1}, {1, 1}, {1, 0}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pr := gaTestProblem(t, in, Config{DisableInterferenceAvoidance: !tc.avoid, ArtifactInterferenceQuirk: tc.quirk})
			x := make([]uint8, pr.rows*pr.cols)
			x[0*pr.cols+0], x[0*pr.cols+1] = 1, 1
			x[1*pr.cols+0], x[1*pr.cols+1] = 1, 1
			x[2*pr.cols+0] = 1
			denseRepairEval(pr, rand.New(rand.NewPCG(1, 1)), x)
			got := make([][]uint8, pr.rows)
			for j := range got {
				got[j] = x[j*pr.cols : j*pr.cols+pr.cols]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("repaired state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolluxTrimKeepsCapsInRandomOrder(t *testing.T) {
	// One job capped at 3 GPUs on 2 nodes over 4 nodes holding 2 each:
	// whatever the order, 3 GPUs on at most 2 nodes remain, and every node
	// is trimmed some of the time.
	in := policy.Input{
		Nodes: []policy.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}, {ID: "c", GPUs: 4}, {ID: "d", GPUs: 4}},
		Jobs:  []policy.Job{{ID: "j", MaxReplicas: 3}},
	}
	pr := gaTestProblem(t, in, Config{MaxNodesPerJob: 2})
	rng := rand.New(rand.NewPCG(2, 2))
	kept := make([]int, 4)
	for range 2000 {
		x := make([]uint8, pr.cols)
		copy(x, []uint8{2, 2, 2, 2})
		denseRepairEval(pr, rng, x)
		sum, nz := 0, 0
		for n, v := range x[:4] {
			sum += int(v)
			if v != 0 {
				nz++
				kept[n]++
			}
		}
		if sum != 3 || nz != 2 {
			t.Fatalf("trimmed row %v: %d GPUs on %d nodes, want 3 on 2", x[:4], sum, nz)
		}
	}
	for n, k := range kept {
		// Each node is kept with probability 1/2: 1000 ± 5σ (σ ≈ 22).
		if k < 890 || k > 1110 {
			t.Errorf("node %d kept %d times of 2000, want about 1000", n, k)
		}
	}
}

func TestPolluxMutationProbabilities(t *testing.T) {
	// Four jobs, one 8-GPU node, job 0 holding 2 GPUs: after mutation
	// step (3) an element changes with probability q1 + q2 − q1·q2 for job
	// 0 (q1 = 1/4, q2 = 1) and q1 = 1/4 for the others. Steps (1) and (2)
	// are neutralised by a current allocation equal to the state, and
	// zeroing only lowers; a change upwards is a step (3) hit whose draw
	// was not the current value.
	in := policy.Input{
		Nodes:   []policy.Node{{ID: "a", GPUs: 8}},
		Jobs:    []policy.Job{{ID: "j0", MaxReplicas: 8}, {ID: "j1", MaxReplicas: 8, AttainedService: 1}, {ID: "j2", MaxReplicas: 8, AttainedService: 2}, {ID: "j3", MaxReplicas: 8, AttainedService: 3}},
		Current: policy.Allocations{"j0": {"a", "a"}},
	}
	pr := gaTestProblem(t, in, Config{})
	rng := rand.New(rand.NewPCG(3, 3))
	const trials = 40000
	up := make([]int, 4)
	base := denseBase(pr)
	for range trials {
		x := denseBase(pr)
		denseMutate(pr, rng, x)
		for j := range 4 {
			if x[j*pr.cols] > base[j*pr.cols] {
				up[j]++
			}
		}
	}
	// A hit draws uniformly in [cur, 8]: it rises with probability 6/7 for
	// job 0 (cur 2) and 8/9 for the others (cur 0). Steps (1)–(2) leave
	// job 0 at 2 GPUs unless (2) zeroes it (probability 0.01), after which
	// a hit raises from 0.
	q1 := 0.25
	want := []float64{1 * (0.99*6.0/7 + 0.01*8.0/9), q1 * 8 / 9, q1 * 8 / 9, q1 * 8 / 9}
	for j := range 4 {
		got := float64(up[j]) / trials
		// Standard error below 0.0025; allow 5 σ.
		if math.Abs(got-want[j]) > 0.0125 {
			t.Errorf("job %d raised with frequency %.4f, want %.4f ± 0.0125", j, got, want[j])
		}
	}
}

func TestGaRunStopsOnCancelledContext(t *testing.T) {
	in := gaTestInput(rand.New(rand.NewPCG(4, 4)))
	in.Nodes = append(in.Nodes, policy.Node{ID: "big", GPUs: 8})
	pr := gaTestProblem(t, in, Config{})
	e := &gaEngine{}
	pr.seeds = []spState{{}}
	pr.seeds[0].copyFrom(&pr.base)
	e.reset(gaParams{popSize: 10, generations: 50, crossProb: 0.9, maxMatings: 100, rows: pr.rows}, pr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := e.run(ctx, rand.New(rand.NewPCG(1, 1)), 1)
	if !res.cancelled || res.generations != 1 {
		t.Errorf("run on a cancelled context: cancelled=%v generations=%d, want true and 1", res.cancelled, res.generations)
	}
	if len(e.pop) != 1 {
		t.Errorf("population = %d, want the 1 seed", len(e.pop))
	}
}
