package consul_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

func TestNewConfig(t *testing.T) {
	raw, err := api.NewClient(api.DefaultConfig()) // New does not contact Consul
	if err != nil {
		t.Fatalf("failed to create api client: %v", err)
	}
	tests := map[string]struct {
		cfg        consul.Config
		wantErr    bool
		wantPrefix string
	}{
		"zero value":            {cfg: consul.Config{}, wantPrefix: "pollux/"},
		"custom prefix":         {cfg: consul.Config{Prefix: "team-a/pollux/"}, wantPrefix: "team-a/pollux/"},
		"prefix without slash":  {cfg: consul.Config{Prefix: "pollux"}, wantErr: true},
		"prefix leading slash":  {cfg: consul.Config{Prefix: "/pollux/"}, wantErr: true},
		"prefix with dot-dot":   {cfg: consul.Config{Prefix: "a/../b/"}, wantErr: true},
		"prefix empty segment":  {cfg: consul.Config{Prefix: "a//"}, wantErr: true},
		"session TTL too short": {cfg: consul.Config{SessionTTL: 500 * time.Millisecond}, wantErr: true},
		"lock delay too long":   {cfg: consul.Config{LockDelay: 2 * time.Minute}, wantErr: true},
		"lock key escapes":      {cfg: consul.Config{LockKey: "../leader"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := consul.New(raw, tc.cfg)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("New(%+v) = nil error, want an error", tc.cfg)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tc.cfg, err)
			}
			if diff := cmp.Diff(tc.wantPrefix, c.Prefix()); diff != "" {
				t.Errorf("Prefix() (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := consul.New(nil, consul.Config{}); err == nil {
		t.Errorf("New(nil, ...) = nil error, want an error")
	}
}

// The adapters implement the controller's interfaces.
var (
	_ jobs.KV          = (*consul.Client)(nil)
	_ jobs.Leadership  = (*consul.Leader)(nil)
	_ jobs.KeyLister   = (*consul.Client)(nil)
	_ jobs.TreeReader  = (*consul.Client)(nil)
	_ jobs.BatchWriter = (*consul.Client)(nil)
)

func TestGetPut(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	ctx := context.Background()

	if _, _, err := c.Get(ctx, "absent"); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Get(absent) error = %v, want contract.ErrNotFound", err)
	}
	tests := map[string]struct {
		key   string
		value []byte
	}{
		"plain":            {"config", []byte(`{"interval":"60s"}`)},
		"job key":          {contract.MetricsKey("default", "train"), []byte(`{"version":1}`)},
		"dots inside":      {"jobs/default/a..b/state", []byte("x")},
		"empty value":      {"status", []byte{}},
		"nil value":        {"nil", nil},
		"binary value":     {"bin", []byte{0, 1, 2, 255}},
		"spaces and chars": {"jobs/ns/job with space?&=#/decision", []byte("y")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := c.Put(ctx, tc.key, tc.value); err != nil {
				t.Fatalf("Put: %v", err)
			}
			got, idx, err := c.Get(ctx, tc.key)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			want := tc.value
			if want == nil {
				want = []byte{} // present: never nil
			}
			if got == nil || !bytes.Equal(got, want) {
				t.Errorf("Get = %q (nil: %v), want %q", got, got == nil, want)
			}
			if idx == 0 {
				t.Errorf("Get index = 0, want > 0")
			}
			// The key is where the prefix says, verbatim.
			pair, _, err := raw.KV().Get(c.Prefix()+tc.key, nil)
			if err != nil || pair == nil {
				t.Fatalf("raw Get(%s) = %v, %v; want the pair", c.Prefix()+tc.key, pair, err)
			}
			if pair.ModifyIndex != idx {
				t.Errorf("raw ModifyIndex = %d, Get index = %d", pair.ModifyIndex, idx)
			}
			// A second Put overwrites and moves the index.
			if err := c.Put(ctx, tc.key, []byte("again")); err != nil {
				t.Fatalf("Put again: %v", err)
			}
			got, idx2, err := c.Get(ctx, tc.key)
			if err != nil || string(got) != "again" || idx2 <= idx {
				t.Errorf("Get after overwrite = %q, %d, %v; want \"again\", index > %d", got, idx2, err, idx)
			}
		})
	}
}

func TestCAS(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	ctx := context.Background()

	// put writes a key and returns its index (0: leave it absent).
	put := func(t *testing.T, key string, exists bool) uint64 {
		t.Helper()
		if !exists {
			return 0
		}
		if err := c.Put(ctx, key, []byte("old")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		_, idx, err := c.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		return idx
	}
	tests := map[string]struct {
		exists bool
		// index computes the CAS index from the key's current index.
		index    func(cur uint64) uint64
		bumpedBy bool // someone else writes between the read and the CAS
		wantErr  error
		want     string
	}{
		"create only, absent":   {exists: false, index: func(uint64) uint64 { return 0 }, want: "new"},
		"create only, exists":   {exists: true, index: func(uint64) uint64 { return 0 }, wantErr: contract.ErrConflict, want: "old"},
		"current index":         {exists: true, index: func(cur uint64) uint64 { return cur }, want: "new"},
		"stale index":           {exists: true, index: func(cur uint64) uint64 { return cur }, bumpedBy: true, wantErr: contract.ErrConflict, want: "theirs"},
		"index of absent key":   {exists: false, index: func(uint64) uint64 { return 1 }, wantErr: contract.ErrConflict},
		"index from the future": {exists: true, index: func(cur uint64) uint64 { return cur + 1000 }, wantErr: contract.ErrConflict, want: "old"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			key := "cas/" + unsafeChars.ReplaceAllString(name, "_")
			idx := tc.index(put(t, key, tc.exists))
			if tc.bumpedBy {
				if err := c.Put(ctx, key, []byte("theirs")); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			err := c.CAS(ctx, key, []byte("new"), idx)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("CAS(index %d) error = %v, want %v", idx, err, tc.wantErr)
			}
			got, _, err := c.Get(ctx, key)
			if tc.want == "" {
				if !errors.Is(err, contract.ErrNotFound) {
					t.Errorf("Get after failed create = %q, %v; want not found", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("value after CAS (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyValidation(t *testing.T) {
	raw := rawClient(t)
	parent := testPrefix(t, raw)
	c := newClient(t, raw, consul.Config{Prefix: parent + "p/"})
	ctx := context.Background()

	ops := map[string]func(key string) error{
		"Get":    func(k string) error { _, _, err := c.Get(ctx, k); return err },
		"Put":    func(k string) error { return c.Put(ctx, k, []byte("x")) },
		"CAS":    func(k string) error { return c.CAS(ctx, k, []byte("x"), 0) },
		"Watch":  func(k string) error { _, _, err := c.Watch(ctx, k, 0, time.Second); return err },
		"Delete": func(k string) error { return c.Delete(ctx, k, true) },
	}
	keys := map[string]string{
		"empty":            "",
		"leading slash":    "/escape",
		"dot-dot":          "..",
		"dot-dot segment":  "../escape",
		"dot-dot inside":   "jobs/../../escape",
		"dot segment":      "./escape",
		"empty segment":    "jobs//x",
		"trailing slash":   "jobs/",
		"only a slash":     "/",
		"dot-dot at end":   "jobs/..",
		"leading two dots": "../../pollux/config",
	}
	for kname, key := range keys {
		for oname, op := range ops {
			t.Run(kname+"/"+oname, func(t *testing.T) {
				if err := op(key); !errors.Is(err, consul.ErrInvalidKey) {
					t.Errorf("%s(%q) error = %v, want consul.ErrInvalidKey", oname, key, err)
				}
			})
		}
	}
	// Nothing was written anywhere near the prefix.
	if diff := cmp.Diff([]string{}, keysUnder(t, raw, parent)); diff != "" {
		t.Errorf("keys under the parent of the prefix (-want +got):\n%s", diff)
	}
}

func TestValueSizeLimit(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	ctx := context.Background()

	tests := map[string]struct {
		size    int
		write   func(key string, v []byte) error
		wantErr error
	}{
		"put at the limit":       {size: consul.MaxValueSize, write: func(k string, v []byte) error { return c.Put(ctx, k, v) }},
		"cas at the limit":       {size: consul.MaxValueSize, write: func(k string, v []byte) error { return c.CAS(ctx, k, v, 0) }},
		"put one byte too many":  {size: consul.MaxValueSize + 1, write: func(k string, v []byte) error { return c.Put(ctx, k, v) }, wantErr: consul.ErrValueTooLarge},
		"cas one byte too many":  {size: consul.MaxValueSize + 1, write: func(k string, v []byte) error { return c.CAS(ctx, k, v, 0) }, wantErr: consul.ErrValueTooLarge},
		"put a megabyte":         {size: 1 << 20, write: func(k string, v []byte) error { return c.Put(ctx, k, v) }, wantErr: consul.ErrValueTooLarge},
		"put a small value":      {size: 10, write: func(k string, v []byte) error { return c.Put(ctx, k, v) }},
		"cas an empty value":     {size: 0, write: func(k string, v []byte) error { return c.CAS(ctx, k, v, 0) }},
		"put an empty value too": {size: 0, write: func(k string, v []byte) error { return c.Put(ctx, k, v) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			key := "size/" + unsafeChars.ReplaceAllString(name, "_")
			value := bytes.Repeat([]byte("v"), tc.size)
			err := tc.write(key, value)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("write of %d bytes: error = %v, want %v", tc.size, err, tc.wantErr)
			}
			got, _, gerr := c.Get(ctx, key)
			if tc.wantErr != nil {
				if !errors.Is(gerr, contract.ErrNotFound) {
					t.Errorf("refused value was written anyway: %d bytes, %v", len(got), gerr)
				}
				return
			}
			if gerr != nil || len(got) != tc.size {
				t.Errorf("Get = %d bytes, %v; want %d bytes", len(got), gerr, tc.size)
			}
		})
	}

	// The limit is Consul's own: the agent refuses one byte more.
	_, err := raw.KV().Put(&api.KVPair{Key: c.Prefix() + "size/raw", Value: bytes.Repeat([]byte("v"), consul.MaxValueSize+1)}, nil)
	if err == nil {
		t.Errorf("Consul accepted a value of MaxValueSize+1 bytes; the limit does not match the agent's kv_max_value_size")
	} else {
		t.Logf("Consul refuses MaxValueSize+1 bytes itself: %v", err)
	}
}

func TestWatch(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	ctx := context.Background()

	tests := map[string]struct {
		initial []byte // nil: the key is absent
		// change runs 300ms into the watch; nil: no change.
		change    func(key string) error
		wait      time.Duration
		wantValue []byte // nil: absent
		wantWoken bool   // returned well before wait, with a new index
	}{
		"wakes on put": {
			initial: []byte("v1"), wait: 20 * time.Second, wantWoken: true, wantValue: []byte("v2"),
			change: func(k string) error { return c.Put(ctx, k, []byte("v2")) },
		},
		"wakes on cas": {
			initial: []byte("v1"), wait: 20 * time.Second, wantWoken: true, wantValue: []byte("v3"),
			change: func(k string) error {
				_, idx, err := c.Get(ctx, k)
				if err != nil {
					return err
				}
				return c.CAS(ctx, k, []byte("v3"), idx)
			},
		},
		"wakes on delete": {
			initial: []byte("v1"), wait: 20 * time.Second, wantWoken: true, wantValue: nil,
			change: func(k string) error { return c.Delete(ctx, k, false) },
		},
		"absent key wakes on create": {
			initial: nil, wait: 20 * time.Second, wantWoken: true, wantValue: []byte("born"),
			change: func(k string) error { return c.Put(ctx, k, []byte("born")) },
		},
		"times out without a change": {
			initial: []byte("v1"), wait: time.Second, wantValue: []byte("v1"),
		},
		"unrelated key does not wake it": {
			initial: []byte("v1"), wait: 2 * time.Second, wantValue: []byte("v1"),
			change: func(k string) error { return c.Put(ctx, k+"-other", []byte("x")) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := "watch/" + unsafeChars.ReplaceAllString(name, "_")
			if tc.initial != nil {
				if err := c.Put(ctx, key, tc.initial); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			// Index 0 reads at once.
			start := time.Now()
			v0, idx0, err := c.Watch(ctx, key, 0, tc.wait)
			if err != nil {
				t.Fatalf("Watch(index 0): %v", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Watch(index 0) took %v, want an immediate read", d)
			}
			if diff := cmp.Diff(tc.initial, v0); diff != "" || idx0 == 0 {
				t.Fatalf("Watch(index 0) = %q, %d; want %q, index > 0", v0, idx0, tc.initial)
			}
			errc := make(chan error, 1)
			if tc.change != nil {
				go func() {
					time.Sleep(300 * time.Millisecond)
					errc <- tc.change(key)
				}()
			}
			// An absent key's index is the store's: other writes may end the
			// watch early with no change, so watch until the value changes
			// or the wait is used up, as a caller would.
			var (
				got = v0
				idx = idx0
			)
			start = time.Now()
			for time.Since(start) < tc.wait && bytes.Equal(got, v0) && (got == nil) == (v0 == nil) {
				got, idx, err = c.Watch(ctx, key, idx, tc.wait-time.Since(start))
				if err != nil {
					t.Fatalf("Watch: %v", err)
				}
			}
			took := time.Since(start)
			if tc.change != nil {
				if err := <-errc; err != nil {
					t.Fatalf("change: %v", err)
				}
			}
			if diff := cmp.Diff(tc.wantValue, got); diff != "" {
				t.Errorf("Watch value (-want +got):\n%s", diff)
			}
			if tc.wantWoken {
				if took > 3*time.Second || idx <= idx0 {
					t.Errorf("Watch returned after %v with index %d (was %d); want a wake-up within 3s and a higher index", took, idx, idx0)
				}
				t.Logf("woken %v after the watch began (change at 300ms)", took.Round(time.Millisecond))
				return
			}
			// Consul adds up to wait/16 of jitter.
			if took < tc.wait-100*time.Millisecond || took > tc.wait+tc.wait/16+2*time.Second {
				t.Errorf("Watch without a change returned after %v, want about %v", took, tc.wait)
			}
			if idx != idx0 {
				t.Errorf("Watch without a change: index %d, want %d", idx, idx0)
			}
		})
	}
}

func TestWatchCancel(t *testing.T) {
	raw := rawClient(t)
	c := newClient(t, raw, consul.Config{})
	if err := c.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	_, idx, err := c.Get(context.Background(), "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = c.Watch(ctx, "k", idx, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Watch with an expiring context: error = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Watch returned %v after its context ended, want at once", d)
	}
}

func TestDelete(t *testing.T) {
	raw := rawClient(t)
	ctx := context.Background()
	all := []string{
		"jobs/default/train",
		"jobs/default/train/deep/er",
		"jobs/default/train/metrics",
		"jobs/default/train/state",
		"jobs/default/train2/metrics",
		"jobs/default/trainX",
		"jobs/other/train/metrics",
	}
	tests := map[string]struct {
		key     string
		recurse bool
		want    []string
	}{
		"recurse removes the key and its tree only": {
			key: "jobs/default/train", recurse: true,
			want: []string{"jobs/default/train2/metrics", "jobs/default/trainX", "jobs/other/train/metrics"},
		},
		"without recurse removes the key only": {
			key:  "jobs/default/train",
			want: []string{"jobs/default/train/deep/er", "jobs/default/train/metrics", "jobs/default/train/state", "jobs/default/train2/metrics", "jobs/default/trainX", "jobs/other/train/metrics"},
		},
		"recurse on a folder with no key of its own": {
			key: "jobs/other", recurse: true,
			want: []string{"jobs/default/train", "jobs/default/train/deep/er", "jobs/default/train/metrics", "jobs/default/train/state", "jobs/default/train2/metrics", "jobs/default/trainX"},
		},
		"missing key is not an error": {
			key: "jobs/nothing/here", recurse: true,
			want: all,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, raw, consul.Config{})
			for _, k := range all {
				if err := c.Put(ctx, k, []byte(k)); err != nil {
					t.Fatalf("Put(%s): %v", k, err)
				}
			}
			if err := c.Delete(ctx, tc.key, tc.recurse); err != nil {
				t.Fatalf("Delete(%s, %v): %v", tc.key, tc.recurse, err)
			}
			if diff := cmp.Diff(tc.want, keysUnder(t, raw, c.Prefix())); diff != "" {
				t.Errorf("keys after Delete (-want +got):\n%s", diff)
			}
		})
	}
}

// TestListKeys: the keys under a folder, relative to the prefix, and
// only under it ("jobs/default/train/" is not "jobs/default/train2/").
func TestListKeys(t *testing.T) {
	raw := rawClient(t)
	ctx := context.Background()
	c := newClient(t, raw, consul.Config{})
	for _, k := range []string{"jobs/default/train/metrics", "jobs/default/train/state", "jobs/default/train2/metrics", "jobs/other/x/state", "config"} {
		if err := c.Put(ctx, k, []byte(k)); err != nil {
			t.Fatalf("Put(%s): %v", k, err)
		}
	}
	tests := map[string]struct {
		dir  string
		want []string
	}{
		"every job":    {"jobs/", []string{"jobs/default/train/metrics", "jobs/default/train/state", "jobs/default/train2/metrics", "jobs/other/x/state"}},
		"one job":      {"jobs/default/train", []string{"jobs/default/train/metrics", "jobs/default/train/state"}},
		"empty folder": {"jobs/none/", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := c.ListKeys(ctx, tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ListKeys(%s) (-want +got):\n%s", tc.dir, diff)
			}
		})
	}
}

func TestPrefixIsolation(t *testing.T) {
	raw := rawClient(t)
	parent := testPrefix(t, raw)
	ctx := context.Background()
	// "a/" and "ab/": one prefix is a string prefix of the other's
	// parent, not of the other.
	a := newClient(t, raw, consul.Config{Prefix: parent + "a/"})
	ab := newClient(t, raw, consul.Config{Prefix: parent + "ab/"})
	key := contract.MetricsKey("default", "train")

	for _, c := range []*consul.Client{a, ab} {
		if err := c.Put(ctx, key, []byte(c.Prefix())); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if err := c.Put(ctx, contract.ConfigKey, []byte(c.Prefix())); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	for _, c := range []*consul.Client{a, ab} {
		got, _, err := c.Get(ctx, key)
		if err != nil || string(got) != c.Prefix() {
			t.Errorf("%s: Get = %q, %v; want its own value", c.Prefix(), got, err)
		}
	}
	if err := a.Delete(ctx, "jobs", true); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	want := []string{"a/config", "ab/config", "ab/jobs/default/train/metrics"}
	if diff := cmp.Diff(want, keysUnder(t, raw, parent)); diff != "" {
		t.Errorf("keys after a.Delete(jobs, recurse) (-want +got):\n%s", diff)
	}
	if _, _, err := a.Get(ctx, key); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("a.Get after delete: %v, want contract.ErrNotFound", err)
	}
}
