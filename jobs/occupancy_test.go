package jobs

import (
	"testing"

	"github.com/pollux-nomad/pollux/policy"
)

func running(r ...NodeGPUs) []NodeGPUs { return r }

// TestOccupancySwap: two full nodes whose jobs trade places cannot be
// written one after the other (Nomad keeps each job's old allocation until
// its new one is placed), while a shrink frees GPUs a grow can then use.
func TestOccupancySwap(t *testing.T) {
	nodes := []policy.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}}
	x := running(NodeGPUs{Node: "a", GPUs: 4})
	y := running(NodeGPUs{Node: "b", GPUs: 4})
	free := newOccupancy(nodes, [][]NodeGPUs{x, y})
	if free["a"] != 0 || free["b"] != 0 {
		t.Fatalf("free %v, want none", free)
	}
	toB, toA := []NodeGPUs{{Node: "b", GPUs: 4}}, []NodeGPUs{{Node: "a", GPUs: 4}}
	if free.fits(x, toB) || free.fits(y, toA) {
		t.Fatal("a swap of two full nodes fits")
	}
	if !free.fits(x, []NodeGPUs{{Node: "a", GPUs: 4}}) || !free.fits(x, nil) {
		t.Fatal("staying on its own GPUs, or going to zero, does not fit")
	}
	// Stopping x first frees a: y can move there, then x to b.
	free.move(x, nil)
	if !free.fits(y, toA) {
		t.Fatalf("after stopping x, y does not fit on a: %v", free)
	}
	free.move(y, toA)
	if !free.fits(nil, toB) {
		t.Fatalf("after y moved, x does not fit on b: %v", free)
	}

	// Shrink, then grow into what it freed.
	y2 := running(NodeGPUs{Node: "b", GPUs: 4})
	var z []NodeGPUs
	free = newOccupancy(nodes, [][]NodeGPUs{x, y2, z})
	half := []NodeGPUs{{Node: "b", GPUs: 2}}
	if free.fits(z, half) {
		t.Fatal("z fits on b before y shrinks")
	}
	free.move(y2, half)
	if !free.fits(z, half) || free.fits(z, []NodeGPUs{{Node: "b", GPUs: 3}}) {
		t.Fatalf("after y shrank to 2: free %v", free)
	}
}
