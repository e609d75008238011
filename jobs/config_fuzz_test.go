package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

// maxConfigError bounds MergeJSON's and parseState's messages, however
// long the document.
const maxConfigError = 4 << 10

func TestMergeJSONHostile(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	tests := map[string]struct {
		doc string
		// wantErr are substrings of the error; none means the document is
		// valid and want is the result.
		wantErr []string
		want    func(*Config)
	}{
		"empty document":       {doc: "", wantErr: []string{"empty document"}},
		"blank document":       {doc: " \r\n\t", wantErr: []string{"empty document"}},
		"null":                 {doc: " null\n", wantErr: []string{"want a JSON object, got null"}},
		"array":                {doc: `[{"interval":"10s"}]`, wantErr: []string{"at byte 1", "cannot unmarshal array"}},
		"string":               {doc: `"interval=10s"`, wantErr: []string{"cannot unmarshal string"}},
		"truncated":            {doc: `{"interval":"10s",`, wantErr: []string{"unexpected end of JSON input (truncated document?)"}},
		"truncated in a value": {doc: `{"interval":"10`, wantErr: []string{"unexpected end of JSON input"}},
		"trailing garbage":     {doc: `{"interval":"10s"} x`, wantErr: []string{`trailing data after the JSON object at byte 18: "x"`}},
		"trailing brace":       {doc: `{"interval":"10s"}}`, wantErr: []string{`trailing data after the JSON object at byte 18: "}"`}},
		"trailing bracket":     {doc: "{}\n]", wantErr: []string{`trailing data after the JSON object at byte 2: "]"`}},
		"second object":        {doc: `{} {"dry_run":true}`, wantErr: []string{"trailing data"}},
		"unknown field":        {doc: `{"interval":"10s","fairness":1}`, wantErr: []string{`unknown field "fairness"`}},
		"unknown field in ga":  {doc: `{"ga":{"pop":10}}`, wantErr: []string{`unknown field "pop"`}},
		"1 MiB unknown field name": {doc: `{"` + long + `":1}`,
			wantErr: []string{`unknown field "aaaaaaaa`, "..."}},
		"invalid duration":          {doc: `{"interval":"ten seconds"}`, wantErr: []string{`interval: want a duration such as "60s" or "1m30s", got "ten seconds"`}},
		"duration without unit":     {doc: `{"restart_penalty":"30"}`, wantErr: []string{`restart_penalty: want a duration such as "60s" or "1m30s", got "30"`}},
		"duration as a number":      {doc: `{"interval":60}`, wantErr: []string{"cannot unmarshal number into Go struct field configDoc.interval of type string"}},
		"overflowing duration":      {doc: `{"interval":"9999999999h"}`, wantErr: []string{`interval: want a duration such as "60s" or "1m30s", got "9999999999h"`}},
		"1 MiB duration":            {doc: `{"interval":"` + long + `"}`, wantErr: []string{`interval: want a duration such as "60s" or "1m30s", got "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..."`}},
		"zero interval":             {doc: `{"interval":"0s"}`, wantErr: []string{"interval: must be in [1s, 24h0m0s], got 0s"}},
		"negative interval":         {doc: `{"interval":"-1m"}`, wantErr: []string{"interval: must be in [1s, 24h0m0s], got -1m0s"}},
		"sub-second interval":       {doc: `{"interval":"999ms"}`, wantErr: []string{"interval: must be in [1s, 24h0m0s], got 999ms"}},
		"interval of a year":        {doc: `{"interval":"8760h"}`, wantErr: []string{"interval: must be in [1s, 24h0m0s], got 8760h0m0s"}},
		"negative restart":          {doc: `{"restart_penalty":"-1s"}`, wantErr: []string{"restart_penalty: must be in [0s, 24h0m0s], got -1s"}},
		"negative restart_time_max": {doc: `{"restart_time_max":"-1s"}`, wantErr: []string{"restart_time_max: must be in [0s, 24h0m0s], got -1s"}},
		"restart penalty of 100y":   {doc: `{"restart_penalty":"876000h"}`, wantErr: []string{"restart_penalty: must be in [0s, 24h0m0s], got 876000h0m0s"}},
		"fairness_p zero":           {doc: `{"fairness_p":0}`, wantErr: []string{"fairness_p: 0 is not allowed"}},
		"fairness_p negative zero":  {doc: `{"fairness_p":-0}`, wantErr: []string{"fairness_p: 0 is not allowed"}},
		"fairness_p 1e400":          {doc: `{"fairness_p":1e400}`, wantErr: []string{"cannot unmarshal number 1e400 into Go struct field configDoc.fairness_p of type float64"}},
		"fairness_p 1e300":          {doc: `{"fairness_p":1e300}`, wantErr: []string{"fairness_p: must be non-zero with |p| ≤ 100, got 1e+300"}},
		"fairness_p as a string":    {doc: `{"fairness_p":"-1"}`, wantErr: []string{"configDoc.fairness_p of type float64"}},
		"fairness_p 1 MiB digits":   {doc: `{"fairness_p":1` + strings.Repeat("0", 1<<20) + `}`, wantErr: []string{"cannot unmarshal number 1000", "...", "at byte 1048591"}},
		"population 1e10":           {doc: `{"ga":{"population":1e10}}`, wantErr: []string{"cannot unmarshal number 1e10 into Go struct field .ga.population of type int"}},
		"population int overflow":   {doc: `{"ga":{"population":99999999999999999999}}`, wantErr: []string{"cannot unmarshal number 99999999999999999999"}},
		"huge population":           {doc: `{"ga":{"population":10001}}`, wantErr: []string{"ga.population: must be in [2, 10000], got 10001"}},
		"fractional population":     {doc: `{"ga":{"population":10.5}}`, wantErr: []string{"ga.population of type int"}},
		"huge generations":          {doc: `{"ga":{"generations":2000000000}}`, wantErr: []string{"ga.generations: must be in [1, 100000], got 2000000000"}},
		"ga not an object":          {doc: `{"ga":100}`, wantErr: []string{"cannot unmarshal number into Go struct field configDoc.ga"}},
		"bool as a string":          {doc: `{"dry_run":"true"}`, wantErr: []string{"configDoc.dry_run of type bool"}},
		"negative max gpus":         {doc: `{"max_gpus_per_job":-1}`, wantErr: []string{"max_gpus_per_job: must be in [0, 16777216], got -1"}},
		"huge max gpus":             {doc: `{"max_gpus_per_job":9223372036854775807}`, wantErr: []string{"max_gpus_per_job: must be in [0, 16777216], got 9223372036854775807"}},
		"zero explore factor":       {doc: `{"explore_factor":0}`, wantErr: []string{"explore_factor: must be in [1, 1024], got 0"}},
		"zero explore start":        {doc: `{"explore_start":0}`, wantErr: []string{"explore_start: must be in [1, 1024], got 0"}},
		"overflowing explore":       {doc: `{"explore_factor":4611686018427387904}`, wantErr: []string{"explore_factor: must be in [1, 1024], got 4611686018427387904"}},
		"1 MiB device":              {doc: `{"device":"a/` + long + `"}`, wantErr: []string{`device: want vendor/type or vendor/type/name, got "a/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..."`}},
		"1 MiB policy":              {doc: `{"policy":"` + long + `"}`, wantErr: []string{`policy: want pollux, tiresias, optimus or sia, got "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..."`}},
		"1 MiB node pool":           {doc: `{"node_pool":"` + long + `"}`, wantErr: []string{"node_pool: at most 256 bytes, got 1048576"}},
		"1 MiB kv prefix":           {doc: `{"kv_prefix":"` + long + `/"}`, wantErr: []string{"kv_prefix: must be non-empty, at most 256 bytes"}},
		"empty kv prefix":           {doc: `{"kv_prefix":""}`, wantErr: []string{`kv_prefix: must be non-empty, at most 256 bytes, end with / and not start with /, got ""`}},
		"kv prefix without slash":   {doc: `{"kv_prefix":"pollux"}`, wantErr: []string{`kv_prefix: must be non-empty`, `got "pollux"`}},
		"device with four parts":    {doc: `{"device":"a/b/c/d"}`, wantErr: []string{`device: want vendor/type or vendor/type/name, got "a/b/c/d"`}},
		"device with empty part":    {doc: `{"device":"nvidia//"}`, wantErr: []string{`got "nvidia//"`}},
		"unicode policy":            {doc: `{"policy":"pöllux"}`, wantErr: []string{`policy: want pollux, tiresias, optimus or sia, got "pöllux"`}},
		"invalid UTF-8 is replaced": {doc: "{\"policy\":\"\xff\"}", wantErr: []string{"got \"\ufffd\""}},
		"several problems at once": {doc: `{"interval":"0s","fairness_p":0,"ga":{"population":1,"generations":0},"policy":"x"}`,
			wantErr: []string{"interval:", "fairness_p:", "ga.population:", "ga.generations:", "policy:"}},
		"empty object changes nothing": {doc: " {}\n", want: func(*Config) {}},
		"nulls change nothing":         {doc: `{"interval":null,"ga":null}`, want: func(*Config) {}},
		"largest values are accepted": {doc: `{"interval":"24h","restart_penalty":"24h","explore_factor":1024,"max_gpus_per_job":16777216,"ga":{"population":10000,"generations":100000,"seed":-9223372036854775808}}`,
			want: func(c *Config) {
				c.Interval, c.RestartPenalty, c.ExploreFactor, c.MaxGPUsPerJob = 24*time.Hour, 24*time.Hour, 1024, 16777216
				c.Population, c.Generations, c.Seed = 10000, 100000, math.MinInt64
			}},
		"a later duplicate wins": {doc: `{"interval":"10s","interval":"20s"}`, want: func(c *Config) { c.Interval = 20 * time.Second }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := DefaultConfig()
			in.Device = "nomad/file/mock" // not a default, to see that errors keep it
			got, err := in.MergeJSON([]byte(tc.doc))
			if tc.want != nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				want := in
				tc.want(&want)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; config %+v", got)
			}
			checkRefused(t, in, got, err, tc.wantErr)
		})
	}
}

// TestTruncatedAtEveryByte cuts a valid configuration and a valid state
// at every byte: every cut is an error saying where the input ended.
func TestTruncatedAtEveryByte(t *testing.T) {
	config := []byte(`{"interval":"10s","fairness_p":-0.5,"restart_penalty":"1m","device":"nomad/file/mock","node_pool":"gpu",` +
		`"max_gpus_per_job":16,"dry_run":true,"kv_prefix":"px/","interference_avoidance":false,"explore_factor":2,"explore_start":2,` +
		`"policy":"tiresias","ga":{"population":50,"generations":20,"seed":-7}}`)
	if _, err := DefaultConfig().MergeJSON(config); err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(config); n++ {
		_, err := DefaultConfig().MergeJSON(config[:n])
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at byte %d: unexpected end of JSON input (truncated document?)", n)) {
			t.Errorf("config cut at byte %d: error %v", n, err)
		}
	}
	state := validState(t)
	for n := 0; n < len(state); n++ {
		_, err := parseState(state[:n])
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at byte %d: unexpected end of JSON input (truncated document?)", n)) {
			t.Errorf("state cut at byte %d: error %v", n, err)
		}
	}
}

// TestMergeJSONKeepsWrappedErrors checks that shortening a decoding error
// keeps it available to errors.As.
func TestMergeJSONKeepsWrappedErrors(t *testing.T) {
	_, err := DefaultConfig().MergeJSON([]byte(`{"fairness_p":"x"}`))
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) || typ.Field != "fairness_p" {
		t.Errorf("error %v: errors.As(*json.UnmarshalTypeError) = %v", err, typ)
	}
}

// FuzzMergeJSON merges arbitrary documents into the defaults: no panic; a
// merged configuration is valid; an error leaves the configuration as it
// was and is short.
func FuzzMergeJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, ``, `[]`, `{}}`, `{"interval":"10s","fairness_p":1,"device":"nomad/file/mock","dry_run":true,"ga":{"population":50,"seed":9}}`,
		`{"interval":"0s"}`, `{"fairness_p":0}`, `{"fairness_p":1e400}`, `{"restart_penalty":"-1s"}`, `{"ga":{"population":1e10}}`,
		`{"kv_prefix":"x/","node_pool":"gpu","policy":"tiresias","explore_factor":1024,"max_gpus_per_job":0,"interference_avoidance":false}`,
		`{"interval":"24h0m0.000000001s"}`, `{"Interval":"5s"}`, `{"interval":"1.5h","ga":{"generations":100000,"seed":-1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := DefaultConfig()
		got, err := in.MergeJSON(data)
		if err != nil {
			if diff := cmp.Diff(in, got); diff != "" {
				t.Errorf("config changed on error %v (-in +got):\n%s", err, diff)
			}
			if len(err.Error()) >= maxConfigError {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Errorf("merged config %+v is invalid: %v", got, err)
		}
	})
}

// validState returns the JSON of a state with a fitted model.
func validState(t testing.TB) []byte {
	t.Helper()
	s := State{
		Version:       stateVersion,
		Perf:          &contract.PerfParams{AlphaC: 0.02, BetaC: 0.0007, AlphaN: 0.12, BetaN: 0.002, AlphaR: 0.03, BetaR: 0.001, Gamma: 2},
		Grad:          &contract.GradParams{Sqr: 0.5, Var: 5},
		MetricsIndex:  42,
		ProfilePoints: 3, MaxProfiled: 4,
		Decision:     &Decision{BatchSize: 512, LocalBsz: 128, NumReplicas: 4, LR: 0.2, NumNodes: 1, Placement: "n1:4", Round: 9},
		Allocation:   []string{"n1", "n1", "n1", "n1"},
		AppliedIndex: 7, AppliedAt: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
		Restarts: 2, AttainedService: 3600,
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// editState returns validState with the JSON fields in edits replaced
// (dotted names reach into objects).
func editState(t testing.TB, edits map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(validState(t), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range edits {
		obj := m
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			obj = obj[p].(map[string]any)
		}
		obj[parts[len(parts)-1]] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseStateHostile(t *testing.T) {
	tests := map[string]struct {
		doc     []byte
		wantErr []string
	}{
		"empty":                 {doc: []byte(""), wantErr: []string{"at byte 0: unexpected end of JSON input (truncated document?)"}},
		"null":                  {doc: []byte("null"), wantErr: []string{"version 0, want 1"}},
		"truncated":             {doc: validState(t)[:40], wantErr: []string{"at byte 40: unexpected end of JSON input (truncated document?)"}},
		"trailing data":         {doc: append(validState(t), 'x'), wantErr: []string{"invalid character 'x' after top-level value"}},
		"version 2":             {doc: editState(t, map[string]any{"version": 2}), wantErr: []string{"version 2, want 1"}},
		"version as a string":   {doc: editState(t, map[string]any{"version": "1"}), wantErr: []string{"State.version of type int"}},
		"negative alpha_c":      {doc: editState(t, map[string]any{"perf.alpha_c": -1}), wantErr: []string{"perf: alpha_c: must be finite and at least"}},
		"gamma out of range":    {doc: editState(t, map[string]any{"perf.gamma": 11}), wantErr: []string{"perf: gamma: must be in [1, 10], got 11"}},
		"overflowing beta_n":    {doc: []byte(strings.Replace(string(validState(t)), `"beta_n":0.002`, `"beta_n":1e400`, 1)), wantErr: []string{"cannot unmarshal number 1e400", "beta_n"}},
		"negative grad sqr":     {doc: editState(t, map[string]any{"grad.sqr": -0.5}), wantErr: []string{"grad.sqr: must be finite and non-negative, got -0.5"}},
		"negative grad var":     {doc: editState(t, map[string]any{"grad.var": -5}), wantErr: []string{"grad.var: must be finite and non-negative, got -5"}},
		"grad sum overflows":    {doc: editState(t, map[string]any{"grad.sqr": 1e308, "grad.var": 1e308}), wantErr: []string{"grad: sqr + var overflows: 1e+308 + 1e+308"}},
		"negative restarts":     {doc: editState(t, map[string]any{"restarts": -1}), wantErr: []string{"restarts: must be in [0, 9223372036854775807], got -1"}},
		"negative points":       {doc: editState(t, map[string]any{"profile_points": -3}), wantErr: []string{"profile_points: must be in"}},
		"huge max profiled":     {doc: editState(t, map[string]any{"max_profiled": 1 << 40}), wantErr: []string{"max_profiled: must be in [0, 16777216], got 1099511627776"}},
		"negative service":      {doc: editState(t, map[string]any{"attained_service": -1}), wantErr: []string{"attained_service: must be in [0, 1e+15], got -1"}},
		"huge service":          {doc: editState(t, map[string]any{"attained_service": 1e308}), wantErr: []string{"attained_service: must be in [0, 1e+15], got 1e+308"}},
		"model as a number":     {doc: editState(t, map[string]any{"perf": 3}), wantErr: []string{"cannot unmarshal number into Go struct field State.perf"}},
		"bad applied_at":        {doc: editState(t, map[string]any{"applied_at": "yesterday"}), wantErr: []string{`parsing time "yesterday"`}},
		"1 MiB number literal":  {doc: []byte(`{"version":1` + strings.Repeat("0", 1<<20) + `}`), wantErr: []string{"cannot unmarshal number 1000", "..."}},
		"1 MiB applied_at":      {doc: editState(t, map[string]any{"applied_at": strings.Repeat("9", 1<<20)}), wantErr: []string{"parsing time", "..."}},
		"several problems once": {doc: editState(t, map[string]any{"perf.gamma": 0, "grad.var": -1, "restarts": -1}), wantErr: []string{"perf: gamma", "grad.var", "restarts"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := parseState(tc.doc)
			if err == nil {
				t.Fatalf("no error; state %+v", s)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %.400q does not contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "failed to parse state: ") {
				t.Errorf("error %.100q lacks the failed-to-parse prefix", err)
			}
			if len(err.Error()) >= maxConfigError {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
		})
	}
}

func TestParseStateAcceptsValid(t *testing.T) {
	for name, doc := range map[string][]byte{
		"fitted":                  validState(t),
		"fresh":                   []byte(`{"version":1}`),
		"unknown fields":          []byte(`{"version":1,"future":{"x":[1,2]}}`),
		"no gradient noise":       editState(t, map[string]any{"grad.sqr": 0, "grad.var": 0}),
		"largest attained":        editState(t, map[string]any{"attained_service": 1e15}),
		"large but finite grad":   editState(t, map[string]any{"grad.sqr": 1e300, "grad.var": 1e300}),
		"multi-node state sample": editState(t, map[string]any{"grad.sqr": 4e-7, "grad.var": 1.5e21}),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := parseState(doc)
			if err != nil {
				t.Fatal(err)
			}
			checkState(t, s)
		})
	}
}

// checkState asserts that an accepted state's model is usable: valid
// parameters and a finite goodput over a range of configurations.
func checkState(t *testing.T, s *State) {
	t.Helper()
	if s.Version != stateVersion {
		t.Errorf("version %d", s.Version)
	}
	if s.Perf != nil {
		if err := model.PerfParams(*s.Perf).Validate(); err != nil {
			t.Errorf("accepted perf %+v: %v", *s.Perf, err)
		}
	}
	if g := s.Grad; g != nil && (!(g.Sqr >= 0) || !(g.Var >= 0) || math.IsInf(g.Sqr+g.Var, 0)) {
		t.Errorf("accepted grad %+v", *g)
	}
	if s.Restarts < 0 || s.ProfilePoints < 0 || s.MaxProfiled < 0 || s.MaxProfiled > maxMetaValue ||
		!(s.AttainedService >= 0) || s.AttainedService > maxAttainedService {
		t.Errorf("accepted counters %+v", *s)
	}
	if s.Perf != nil && s.Grad != nil {
		f := model.GoodputFunc{Perf: model.PerfParams(*s.Perf), Grad: model.GradParams(*s.Grad), InitBatchSize: 128}
		for _, k := range []int{1, 4, 64} {
			c := f.Optimize(1, k, model.Bounds{MaxBatchSize: 1 << 14, MinLocalBsz: 1, MaxLocalBsz: 1024, Accumulation: true})
			if math.IsNaN(c.Goodput) || math.IsInf(c.Goodput, 0) || c.Goodput < 0 {
				t.Errorf("goodput on %d GPUs of %+v, %+v: %+v", k, *s.Perf, *s.Grad, c)
			}
		}
	}
}

// FuzzParseState decodes arbitrary persisted states: no panic; an
// accepted state has valid model parameters and counters, and its model
// gives a finite goodput.
func FuzzParseState(f *testing.F) {
	f.Add(validState(f))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"grad":{"sqr":1e308,"var":1e308}}`))
	f.Add([]byte(`{"version":1,"perf":{"alpha_c":1e-8,"beta_c":1e-8,"alpha_n":1e-8,"beta_n":1e-8,"alpha_r":1e-8,"beta_r":1e-8,"gamma":10},"grad":{"sqr":5e-324,"var":1e300}}`))
	f.Add([]byte(`{"version":1,"restarts":-1,"attained_service":-0,"max_profiled":16777216}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseState(data)
		if err != nil {
			if len(err.Error()) >= maxConfigError {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
			return
		}
		checkState(t, s)
	})
}

// checkRefused checks a refused configuration: the error names every
// wanted part, stays short, and the configuration is unchanged.
func checkRefused(t *testing.T, in, got Config, err error, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %.600q does not contain %q", err, w)
		}
	}
	if len(err.Error()) >= maxConfigError {
		t.Errorf("error message is %d bytes", len(err.Error()))
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("config changed on error (-in +got):\n%s", diff)
	}
}
