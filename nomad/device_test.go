package nomad

import "testing"

func TestDeviceMatching(t *testing.T) {
	tests := map[string]struct {
		config, request  string
		vendor, typ, nam string // a node's device group
		wantRequest      bool
		wantInstance     bool
	}{
		"same vendor/type":              {"nvidia/gpu", "nvidia/gpu", "nvidia", "gpu", "A100", true, true},
		"request names a model":         {"nvidia/gpu", "nvidia/gpu/A100", "nvidia", "gpu", "A100", true, true},
		"request gives the type only":   {"nvidia/gpu", "gpu", "nvidia", "gpu", "T4", true, true},
		"other vendor":                  {"nvidia/gpu", "amd/gpu", "amd", "gpu", "MI300", false, false},
		"other type":                    {"nomad/file/mock", "nvidia/gpu", "nvidia", "gpu", "A100", false, false},
		"config names a model":          {"nvidia/gpu/A100", "nvidia/gpu/T4", "nvidia", "gpu", "T4", false, false},
		"config names a model, request": {"nvidia/gpu/A100", "nvidia/gpu", "nvidia", "gpu", "A100", true, true},
		"config gives the type only":    {"file", "nomad/file/mock", "nomad", "file", "mock", true, true},
		"malformed request":             {"nvidia/gpu", "nvidia//gpu", "nvidia", "gpu", "", false, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := parseDevice(tc.config)
			if err != nil {
				t.Fatal(err)
			}
			if d.String() != tc.config {
				t.Errorf("String() = %q, want %q", d.String(), tc.config)
			}
			if got := d.matchesRequest(tc.request); got != tc.wantRequest {
				t.Errorf("matchesRequest(%q) = %v, want %v", tc.request, got, tc.wantRequest)
			}
			if got := d.matchesInstance(tc.vendor, tc.typ, tc.nam); got != tc.wantInstance {
				t.Errorf("matchesInstance(%s/%s/%s) = %v, want %v", tc.vendor, tc.typ, tc.nam, got, tc.wantInstance)
			}
		})
	}
}
