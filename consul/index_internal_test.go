package consul

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"
)

// The index rules of Consul's blocking queries. An index that goes
// backwards needs a snapshot restore or a new cluster, which a shared test
// cluster cannot be put through, so the decision is tested here on its own.
func TestIndexRules(t *testing.T) {
	tests := map[string]struct {
		prev, got uint64
		wantReset bool
		wantClamp uint64
	}{
		"first read":             {prev: 0, got: 42, wantClamp: 42},
		"unchanged after wait":   {prev: 42, got: 42, wantClamp: 42},
		"moved forward":          {prev: 42, got: 50, wantClamp: 50},
		"went backwards":         {prev: 42, got: 7, wantReset: true, wantClamp: 7},
		"zero from the server":   {prev: 0, got: 0, wantClamp: 1},
		"backwards to zero":      {prev: 42, got: 0, wantReset: true, wantClamp: 1},
		"backwards by one index": {prev: 42, got: 41, wantReset: true, wantClamp: 41},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := struct {
				Reset bool
				Clamp uint64
			}{indexWentBack(tc.prev, tc.got), clampIndex(tc.got)}
			want := struct {
				Reset bool
				Clamp uint64
			}{tc.wantReset, tc.wantClamp}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("index rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"key used for something else": {api.ErrLockConflict, false},
		"wrapped lock conflict":       {fmt.Errorf("failed to lock: %w", api.ErrLockConflict), false},
		"acl refusal":                 {errors.New("Unexpected response code: 403 (Permission denied)"), false},
		"connection refused":          {errors.New("failed to read lock: Get \"http://127.0.0.1:8500/v1/kv/pollux/leader\": dial tcp 127.0.0.1:8500: connect: connection refused"), true},
		"server error":                {errors.New("Unexpected response code: 500 (No cluster leader)"), true},
		"session lost while waiting":  {errSessionLost, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := retryable(tc.err); got != tc.want {
				t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
