package consul_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// TestPutManyReadTree: PutMany writes more keys than one transaction
// holds, and ReadTree returns each under the folder (not its neighbours)
// with its value and the ModifyIndex Get reports.
func TestPutManyReadTree(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	ctx := context.Background()
	n := consul.MaxTxnOps*2 + 5
	var pairs []contract.KVPair
	for i := range n {
		pairs = append(pairs, contract.KVPair{Key: fmt.Sprintf("jobs/default/j%03d/state", i), Value: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	if err := c.PutMany(ctx, pairs); err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	if err := c.Put(ctx, "jobsx/other", []byte("no")); err != nil {
		t.Fatal(err)
	}
	tree, err := c.ReadTree(ctx, "jobs/")
	if err != nil {
		t.Fatalf("ReadTree: %v", err)
	}
	if len(tree) != n {
		t.Fatalf("ReadTree returned %d keys, want %d", len(tree), n)
	}
	for _, p := range tree {
		got, idx, err := c.Get(ctx, p.Key)
		if err != nil {
			t.Fatalf("Get(%s): %v", p.Key, err)
		}
		if string(got) != string(p.Value) || idx != p.ModifyIndex || p.ModifyIndex == 0 {
			t.Errorf("%s: tree has %q at %d, Get %q at %d", p.Key, p.Value, p.ModifyIndex, got, idx)
		}
	}
	if err := c.PutMany(ctx, []contract.KVPair{{Key: "../escape", Value: []byte("x")}}); err == nil {
		t.Error("PutMany accepted a key outside the prefix")
	}
}
