package pollux

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
)

// TestSettle: of a chosen solution that moves a running job sideways (the
// same GPUs on another node, which gains nothing and costs a restart) and
// starts a waiting job on GPUs spread over two nodes, settle takes the
// move back, keeps the start and packs it on one node.
func TestSettle(t *testing.T) {
	in := policy.Input{Now: 1e4, Current: policy.Allocations{}}
	for i := range 6 {
		in.Nodes = append(in.Nodes, policy.Node{ID: fmt.Sprintf("n%d", i), GPUs: 4})
	}
	for i := range 4 {
		j := policy.Job{ID: fmt.Sprintf("j%d", i), Submitted: float64(i), MaxReplicas: 4, Goodput: gaTestModel{serial: 0.1, comm: 0.2}}
		j.Age = in.Now - j.Submitted
		if i < 3 {
			in.Current[j.ID] = []string{in.Nodes[i].ID, in.Nodes[i].ID, in.Nodes[i].ID, in.Nodes[i].ID}
		}
		in.Jobs = append(in.Jobs, j)
	}
	p := &Policy{}
	cfg := p.cfg.Resolve(policy.RegimeOf(in.Nodes))
	order := polluxJobOrder(in.Jobs)
	pr := &p.prob
	pr.setup(in, order, 24, cfg)
	p.engine.reset(gaParams{popSize: 2, generations: 1, rows: pr.rows}, pr, 1)
	best := p.engine.alloc()
	x := pr.base.dense(pr.rows, pr.cols)
	// Rows in job order (j0..j3, all without service): j0 moves from n0
	// to n5, j3 starts on n3 and n4.
	x[0*6+0], x[0*6+5] = 0, 4
	x[3*6+3], x[3*6+4] = 2, 2
	pr.states[best].setDense(x, pr.rows, pr.cols)
	f0, f1, h := pr.repairEval(rand.New(rand.NewPCG(1, 1)), best)
	p.engine.f0[best], p.engine.f1[best], p.engine.hash[best] = f0, f1, h

	settled := p.settle(rand.New(rand.NewPCG(1, 2)), best)
	if settled != 1 {
		t.Errorf("settled %d changes, want 1 (the move)", settled)
	}
	got := pr.states[best].dense(pr.rows, pr.cols)
	want := slices.Clone(pr.base.dense(pr.rows, pr.cols))
	want[3*6+3] = 4
	if !slices.Equal(got, want) {
		t.Errorf("settled allocation\n%v, want\n%v", got, want)
	}
	if !(p.engine.f0[best] < f0) {
		t.Errorf("objective %v after settling, want below %v", p.engine.f0[best], f0)
	}
}

// TestPack: a row that no node holds takes the node with the most room
// (of equals, one it already uses), and its rest goes where it fits most
// tightly, so that whole free nodes stay whole; a part of a row on
// several nodes avoids the nodes of another distributed job.
func TestPack(t *testing.T) {
	pr := &polluxProblem{rows: 2, cols: 4, capacity: []int32{4, 4, 4, 4}, nodeType: []int32{0, 0, 0, 0}, avoid: true}
	var x spState
	// Row 0 holds 3 GPUs of n0; row 1 has 1 on n0, 1 on n1 and 3 on n3.
	x.setDense([]uint8{3, 0, 0, 0, 1, 1, 0, 3}, 2, 4)
	got := pr.pack(nil, &x, 1)
	want := []uint32{spEntry(0, 1), spEntry(1, 4)}
	if !slices.Equal(got, want) {
		t.Errorf("pack = %v, want %v (n0:1 n1:4)", got, want)
	}

	// Row 0 spans n0 and n1 (2 GPUs each), row 1 holds 2 GPUs of n5,
	// row 2 has 2 GPUs on each of n2, n3 and n4.
	pr = &polluxProblem{rows: 3, cols: 6, capacity: []int32{4, 4, 4, 4, 4, 4}, nodeType: make([]int32, 6), avoid: true}
	x.setDense([]uint8{
		2, 2, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 2,
		0, 0, 2, 2, 2, 0,
	}, 3, 6)
	got = pr.pack(nil, &x, 2)
	want = []uint32{spEntry(2, 4), spEntry(5, 2)}
	if !slices.Equal(got, want) {
		t.Errorf("pack = %v, want %v (n2:4 n5:2: not n0, whose distributed job would lose its GPUs, nor a whole node)", got, want)
	}

	// A row that fits one node goes to the tightest one, even one with a
	// distributed job.
	x.setDense([]uint8{
		2, 2, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0,
		0, 0, 1, 1, 0, 0,
	}, 3, 6)
	got = pr.pack(nil, &x, 2)
	want = []uint32{spEntry(0, 2)}
	if !slices.Equal(got, want) {
		t.Errorf("pack = %v, want %v (n0:2)", got, want)
	}
}
