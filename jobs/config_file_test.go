package jobs

import (
	"fmt"
	"github.com/pollux-nomad/pollux/policy/registry"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// allFieldsJSON and allFieldsHCL set every field to a non-default value,
// the same in both syntaxes.
const (
	allFieldsJSON = `{"interval":"10s","fairness_p":-0.5,"restart_penalty":"1m","restart_time_max":"5m","device":"nomad/file/mock","node_pool":"gpu",` +
		`"max_gpus_per_job":16,"dry_run":true,"kv_prefix":"px/","interference_avoidance":false,"explore_factor":2,"explore_start":2,` +
		`"policy":"tiresias","gpu_type_source":"attr.gpu.model","gpu_type_map":{"Tesla T4":"t4"},"gpu_type_speed":{"t4":1.5},` +
		`"ga":{"population":50,"generations":20,"seed":-7}}`
	allFieldsHCL = `# every field
interval               = "10s"
fairness_p             = -0.5
restart_penalty        = "1m"
restart_time_max       = "5m"
device                 = "nomad/file/mock"
node_pool              = "gpu"
max_gpus_per_job       = 16
dry_run                = true
kv_prefix              = "px/"
interference_avoidance = false
explore_factor         = 2
explore_start          = 2
policy                 = "tiresias"
gpu_type_source        = "attr.gpu.model"
gpu_type_map           = { "Tesla T4" = "t4" }
gpu_type_speed         = { t4 = 1.5 }

ga {
  population  = 50
  generations = 20
  seed        = -7
}
`
)

func TestMergeHCLMatchesJSON(t *testing.T) {
	want, err := DefaultConfig().MergeJSON([]byte(allFieldsJSON))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DefaultConfig().MergeHCL([]byte(allFieldsHCL), "all.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HCL and JSON differ (-json +hcl):\n%s", diff)
	}
	if cmp.Equal(got, DefaultConfig()) {
		t.Error("the document changed nothing")
	}
}

// The example files in deploy/ say the same thing.
func TestConfigExamplesAgree(t *testing.T) {
	fromJSON, err := LoadConfigFile(filepath.FromSlash("../deploy/config.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	fromHCL, err := LoadConfigFile(filepath.FromSlash("../deploy/config.example.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromJSON, fromHCL); diff != "" {
		t.Errorf("deploy/config.example.hcl differs from deploy/config.example.json (-json +hcl):\n%s", diff)
	}
	if fromHCL.MaxGPUsPerJob != 32 {
		t.Errorf("max_gpus_per_job %d, want the example's 32", fromHCL.MaxGPUsPerJob)
	}
}

func TestMergeHCLEmptyAndPartial(t *testing.T) {
	in := DefaultConfig()
	in.Device = "nomad/file/mock"
	for name, tc := range map[string]struct {
		src  string
		want func(*Config)
	}{
		"empty file":     {src: "", want: func(*Config) {}},
		"comment only":   {src: "# nothing\n// nothing\n", want: func(*Config) {}},
		"empty ga":       {src: "ga {}\n", want: func(*Config) {}},
		"one field":      {src: `interval = "1m30s"`, want: func(c *Config) { c.Interval = 90 * time.Second }},
		"one ga field":   {src: "ga {\n  seed = 9\n}\n", want: func(c *Config) { c.Seed = 9 }},
		"null is absent": {src: "interval = null\n", want: func(*Config) {}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := in.MergeHCL([]byte(tc.src), "p.hcl")
			if err != nil {
				t.Fatal(err)
			}
			want := in
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Every refusal names the file, the line and column, and the field.
func TestMergeHCLRefused(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	manyUnknown := ""
	for i := range 100 {
		manyUnknown += fmt.Sprintf("x%d = 1\n", i)
	}
	tests := map[string]struct {
		src     string
		wantErr []string
	}{
		"unknown attribute": {src: "interval = \"10s\"\nfairness = 1\n",
			wantErr: []string{"cfg.hcl:2,1-9", `An argument named "fairness" is not expected here`}},
		"unknown attribute in ga": {src: "ga {\n  pop = 10\n}\n",
			wantErr: []string{"cfg.hcl:2,3-6", `An argument named "pop" is not expected here`}},
		"unknown block": {src: "telemetry {\n  prometheus = true\n}\n",
			wantErr: []string{"cfg.hcl:1,1-10", `Blocks of type "telemetry" are not expected here`}},
		"block inside ga": {src: "ga {\n  mutation {}\n}\n",
			wantErr: []string{"cfg.hcl:2,3-11", `Blocks of type "mutation" are not expected here`}},
		"ga as an attribute": {src: "ga = 100\n",
			wantErr: []string{"cfg.hcl:1,1-3", `An argument named "ga" is not expected here`}},
		"two ga blocks": {src: "ga {}\nga {}\n", wantErr: []string{"cfg.hcl:2,1-3", "Duplicate ga block"}},
		"labelled ga":   {src: "ga \"x\" {}\n", wantErr: []string{"cfg.hcl:1,4-7", "Extraneous label for ga"}},
		"number for a bool": {src: "dry_run = 1\n",
			wantErr: []string{"cfg.hcl:1,11-12: dry_run: Unsuitable value type; Unsuitable value: bool required, but have number"}},
		"word for a number": {src: "\n\nfairness_p = \"minus one\"\n",
			wantErr: []string{"cfg.hcl:3,15-24: fairness_p: Unsuitable value type; Unsuitable value: a number is required"}},
		"fraction for an int": {src: "ga {\n  population = 10.5\n}\n",
			wantErr: []string{"cfg.hcl:2,16-20: ga.population: Unsuitable value type; Unsuitable value: value must be a whole number"}},
		"list for a string": {src: `device = ["nvidia/gpu"]`,
			wantErr: []string{"cfg.hcl:1,10-11: device: Unsuitable value type; Unsuitable value: string required, but have tuple"}},
		"bad duration": {src: "dry_run = true\ninterval = \"ten seconds\"\n",
			wantErr: []string{`cfg.hcl:2,12-25: interval: want a duration such as "60s" or "1m30s", got "ten seconds"`}},
		"duration without unit": {src: "restart_penalty = 30\n",
			wantErr: []string{`cfg.hcl:1,19-21: restart_penalty: want a duration such as "60s" or "1m30s", got "30"`}},
		"1 MiB duration": {src: `interval = "` + long + `"`,
			wantErr: []string{`cfg.hcl:1,12-1048590: interval: want a duration such as "60s" or "1m30s", got "aaaa`, `..."`}},
		"out of range in ga": {src: "ga {\n  population = 1\n}\n",
			wantErr: []string{"cfg.hcl:2,16-17: ga.population: must be in [2, 10000], got 1"}},
		"fairness_p zero": {src: "fairness_p = 0\n", wantErr: []string{"cfg.hcl:1,14-15: fairness_p: 0 is not allowed"}},
		"several at once": {src: "interval = \"0s\"\npolicy = \"x\"\n",
			wantErr: []string{"cfg.hcl:1,12-16: interval: must be in [1s, 24h0m0s], got 0s", `cfg.hcl:2,10-13: policy: want pollux, tiresias, optimus or sia, got "x"`}},
		"a variable":     {src: "device = gpu\n", wantErr: []string{"cfg.hcl:1,10-13: device: Variables not allowed"}},
		"a function":     {src: "device = lower(\"A/B\")\n", wantErr: []string{"cfg.hcl:1,10-22: device: Function calls not allowed"}},
		"redefined":      {src: "interval = \"10s\"\ninterval = \"20s\"\n", wantErr: []string{"cfg.hcl:2,1-9", `Attribute redefined; The argument "interval" was already set at cfg.hcl:1,1-9`}},
		"syntax error":   {src: "interval = \n", wantErr: []string{"cfg.hcl:1,12-2,1: Invalid expression"}},
		"JSON as HCL":    {src: `{"interval":"10s"}`, wantErr: []string{"cfg.hcl:1,1-2"}},
		"1 MiB name":     {src: long + " = 1\n", wantErr: []string{"cfg.hcl:1,1-1048577", `An argument named "aaaa`, "..."}},
		"many problems":  {src: manyUnknown, wantErr: []string{"cfg.hcl:1,1-3: Unsupported argument", "and 92 more errors"}},
		"many redefined": {src: strings.Repeat("x = 1\n", 100), wantErr: []string{"cfg.hcl:2,1-2: Attribute redefined", "and 91 more errors"}},
		"invalid UTF-8":  {src: "policy = \"\xff\"\n", wantErr: []string{"cfg.hcl:1,11-12", "Invalid character encoding"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := DefaultConfig()
			in.Device = "nomad/file/mock" // not a default, to see that errors keep it
			got, err := in.MergeHCL([]byte(tc.src), "cfg.hcl")
			if err == nil {
				t.Fatalf("no error; config %+v", got)
			}
			checkRefused(t, in, got, err, tc.wantErr)
		})
	}
}

func TestLoadConfigFileChoosesTheSyntax(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, tc := range map[string]struct {
		file, src string
		wantErr   []string // none: the file sets interval to 10s
	}{
		"hcl by extension":          {file: "a.hcl", src: `interval = "10s"`},
		"json by extension":         {file: "a.json", src: `{"interval":"10s"}`},
		"upper-case extension":      {file: "a.HCL", src: `interval = "10s"`},
		"json by content":           {file: "a.conf", src: " \n{\"interval\":\"10s\"}"},
		"hcl by content":            {file: "pollux", src: "interval = \"10s\"\n"},
		"hcl in a .json file":       {file: "b.json", src: `interval = "10s"`, wantErr: []string{"b.json: failed to parse configuration: at byte 1"}},
		"json error names the file": {file: "c.json", src: `{"interval":"x"}`, wantErr: []string{"c.json: invalid configuration: interval: want a duration"}},
		"hcl error names the file":  {file: "c.hcl", src: `interval = "x"`, wantErr: []string{"c.hcl:1,12-15: interval: want a duration"}},
		"empty json file":           {file: "e.json", src: "", wantErr: []string{"e.json: failed to parse configuration: empty document"}},
	} {
		t.Run(name, func(t *testing.T) {
			path := write(tc.file, tc.src)
			got, err := LoadConfigFile(path)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				want := DefaultConfig()
				want.Interval = 10 * time.Second
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; config %+v", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), filepath.Join(dir, w)) && !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
		})
	}
	if _, err := LoadConfigFile(filepath.Join(dir, "missing.hcl")); err == nil || !strings.Contains(err.Error(), "missing.hcl") {
		t.Errorf("missing file: error %v", err)
	}
}

// FuzzMergeHCL merges arbitrary HCL into the defaults: no panic; a merged
// configuration is valid; an error leaves the configuration as it was,
// is short and names the file.
func FuzzMergeHCL(f *testing.F) {
	for _, s := range []string{
		"", allFieldsHCL, `interval = "0s"`, "ga {\n population = 1e10\n}", "ga {}\nga {}", `x = 1`, "a {\n}",
		`fairness_p = 1e400`, `device = "${x}"`, "interval = <<EOT\n10s\nEOT\n", `policy = "tiresias" // c`, `{"interval":"10s"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := DefaultConfig()
		got, err := in.MergeHCL(data, "fuzz.hcl")
		if err != nil {
			if diff := cmp.Diff(in, got); diff != "" {
				t.Errorf("config changed on error %v (-in +got):\n%s", err, diff)
			}
			if len(err.Error()) >= maxConfigError {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
			if !strings.Contains(err.Error(), "fuzz.hcl") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Errorf("merged config %+v is invalid: %v", got, err)
		}
	})
}

// The system job deploy/pollux.nomad.hcl parses as HCL, and the agent's
// configuration it writes with a template is one LoadConfigFile accepts,
// at the path its -config argument names.
func TestSystemJobConfigTemplate(t *testing.T) {
	const jobFile = "../deploy/pollux.nomad.hcl"
	src, err := os.ReadFile(filepath.FromSlash(jobFile))
	if err != nil {
		t.Fatal(err)
	}
	file, diags := hclsyntax.ParseConfig(src, jobFile, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	// The template's data is var.config, whose default is the file the job
	// ships with.
	var configDefault string
	for _, blk := range file.Body.(*hclsyntax.Body).Blocks {
		if blk.Type == "variable" && len(blk.Labels) == 1 && blk.Labels[0] == "config" {
			v, diags := blk.Body.Attributes["default"].Expr.Value(nil)
			if diags.HasErrors() {
				t.Fatalf("variable config's default: %v", diags)
			}
			configDefault = v.AsString()
		}
	}
	var templates, args []*hclsyntax.Block
	var walk func(b *hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			switch blk.Type {
			case "template":
				templates = append(templates, blk)
			case "config":
				args = append(args, blk)
			}
			walk(blk.Body)
		}
	}
	walk(file.Body.(*hclsyntax.Body))
	if len(args) != 1 {
		t.Fatalf("%d task config blocks, want 1", len(args))
	}
	argExpr, ok := args[0].Body.Attributes["args"]
	if !ok {
		t.Fatal("task config has no args")
	}
	configPath := ""
	for i, e := range argExpr.Expr.(*hclsyntax.TupleConsExpr).Exprs {
		if v, diags := e.Value(nil); !diags.HasErrors() && v.AsString() == "-config" {
			next, _ := argExpr.Expr.(*hclsyntax.TupleConsExpr).Exprs[i+1].Value(nil)
			configPath = next.AsString()
		}
	}
	if !strings.HasSuffix(configPath, ".hcl") {
		t.Fatalf("-config %q, want an .hcl file", configPath)
	}
	found := false
	for _, tmpl := range templates {
		dest, diags := tmpl.Body.Attributes["destination"].Expr.Value(nil)
		if diags.HasErrors() || dest.AsString() != configPath {
			continue
		}
		found = true
		content := configDefault
		if data, diags := tmpl.Body.Attributes["data"].Expr.Value(nil); !diags.HasErrors() {
			content = data.AsString()
		} else if configDefault == "" {
			t.Fatalf("template data: %v, and no variable config with a default", diags)
		}
		cfg, err := LoadConfigFile(writeTemp(t, "pollux.hcl", content))
		if err != nil {
			t.Fatalf("the job's configuration is refused: %v\n%s", err, content)
		}
		if cfg.Interval != 60*time.Second || cfg.Device != "nvidia/gpu" || cfg.KVPrefix != "pollux/" {
			t.Errorf("the job's configuration is %+v", cfg)
		}
	}
	if !found {
		t.Errorf("no template writes %s", configPath)
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDefaultFairnessFollowsPolicy: left unset, fairness_p is the
// policy's own default (-1 on one GPU type, 0.5 on several), which the
// controller passes on as 0; an operator's value is passed as written.
func TestDefaultFairnessFollowsPolicy(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	s := registry.Relevant(cfg.Policy, registry.Settings{Pollux: registry.PolluxConfig{FairnessP: cfg.FairnessP}})
	if s.Pollux.FairnessP != 0 {
		t.Fatalf("default fairness_p reaches the policy as %v, want 0 (the policy's default)", s.Pollux.FairnessP)
	}
	set, err := DefaultConfig().MergeJSON([]byte(`{"fairness_p": 1}`))
	if err != nil || set.FairnessP != 1 {
		t.Fatalf("fairness_p 1: %v, %v", set.FairnessP, err)
	}
}
