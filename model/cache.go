package model

import "fmt"

// GoodputCache memoises the best goodput per placement shape (nodes,
// replicas) of one job, as the artifact memoises its speedup table
// (pollux-reference.md §3.1; artifact speedup.py, SpeedupFunction). Unlike
// the artifact's fixed 32×32 table it grows to any shape asked for.
//
// It implements the policy package's GoodputModel interface. It is not
// safe for concurrent use: give each goroutine its own cache, or guard it.
type GoodputCache struct {
	fn     GoodputFunc
	bounds Bounds
	// rows[k][n] is the entry for n nodes and k replicas (n ≤ k); a row is
	// allocated when its replica count is first asked for.
	rows [][]cacheEntry
}

// cacheEntry is one memoised search.
type cacheEntry struct {
	choice Choice
	done   bool
}

// NewGoodputCache returns an empty cache of f.Optimize under bounds b.
func NewGoodputCache(f GoodputFunc, b Bounds) *GoodputCache {
	return &GoodputCache{fn: f, bounds: b}
}

// Func returns the goodput function the cache memoises.
func (c *GoodputCache) Func() GoodputFunc { return c.fn }

// Bounds returns the batch-size bounds the cache searches within.
func (c *GoodputCache) Bounds() Bounds { return c.bounds }

// Goodput returns the best goodput on nodes nodes holding replicas GPUs,
// Choice(nodes, replicas).Goodput; Goodput(0, 0) is 0.
func (c *GoodputCache) Goodput(nodes, replicas int) float64 {
	return c.Choice(nodes, replicas).Goodput
}

// Choice returns the best configuration on nodes nodes holding replicas
// GPUs, computing it with GoodputFunc.Optimize on first use; Choice(0, 0)
// is Choice{}. It panics unless 1 ≤ nodes ≤ replicas or both are 0.
func (c *GoodputCache) Choice(nodes, replicas int) Choice {
	if nodes == 0 && replicas == 0 {
		return Choice{}
	}
	if nodes < 1 || replicas < nodes {
		panic(fmt.Sprintf("model: GoodputCache needs 1 <= nodes <= replicas, got nodes=%d replicas=%d", nodes, replicas))
	}
	if replicas >= len(c.rows) {
		grown := make([][]cacheEntry, replicas+1, max(replicas+1, 2*len(c.rows)))
		copy(grown, c.rows)
		c.rows = grown
	}
	row := c.rows[replicas]
	if row == nil {
		row = make([]cacheEntry, replicas+1)
		c.rows[replicas] = row
	}
	e := &row[nodes]
	if !e.done {
		e.choice = c.fn.Optimize(nodes, replicas, c.bounds)
		e.done = true
	}
	return e.choice
}
