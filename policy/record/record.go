package record

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// Version is the version of the record document this package writes and
// reads; a document of another version is refused.
const Version = 1

// Round is one recorded round.
type Round struct {
	// Version is the document's version (Version).
	Version int `json:"version"`
	// Policy is the policy's registered name, Settings the settings it
	// was made with (the part it reads, registry.Relevant).
	Policy   string            `json:"policy"`
	Settings registry.Settings `json:"settings"`
	// Input is the policy's input.
	Input Input `json:"input"`
	// Decision is the allocation the policy returned.
	Decision policy.Allocations `json:"decision"`
	// carry is the input's Carry, encoded into Input.Carry only when the
	// record is: a controller keeps its last rounds in memory, and a
	// large round's population is megabytes of JSON.
	carry policy.Carry
}

// MarshalJSON encodes the record, the carry included.
func (r *Round) MarshalJSON() ([]byte, error) {
	type plain Round
	p := plain(*r)
	if p.Input.Carry == nil && r.carry != nil {
		raw, err := json.Marshal(r.carry)
		if err != nil {
			return nil, fmt.Errorf("failed to encode round %d's carry: %w", r.Input.Round, err)
		}
		p.Input.Carry = raw
	}
	return json.Marshal(p)
}

// Input is policy.Input in a form that encodes: models as their
// parameters, the carry as the policy's JSON.
type Input struct {
	Now     float64            `json:"now"`
	Round   int64              `json:"round"`
	Seed    int64              `json:"seed,omitempty"`
	Jobs    []Job              `json:"jobs"`
	Nodes   []policy.Node      `json:"nodes"`
	Current policy.Allocations `json:"current"`
	Carry   json.RawMessage    `json:"carry,omitempty"`
}

// Job is policy.Job with its models as parameters.
type Job struct {
	ID               string             `json:"id"`
	Goodput          *Model             `json:"goodput,omitempty"`
	TypedGoodput     map[string]*Model  `json:"typed_goodput,omitempty"`
	Oracle           *Oracle            `json:"oracle,omitempty"`
	Submitted        float64            `json:"submitted"`
	Age              float64            `json:"age"`
	AttainedService  float64            `json:"attained_service"`
	MinReplicas      int                `json:"min_replicas"`
	MaxReplicas      int                `json:"max_replicas"`
	NumRestarts      int                `json:"num_restarts,omitempty"`
	RestartTime      float64            `json:"restart_time,omitempty"`
	Restoring        bool               `json:"restoring,omitempty"`
	Held             float64            `json:"held,omitempty"`
	TypedMaxReplicas map[string]int     `json:"typed_max_replicas,omitempty"`
	ProbeSpeed       map[string]float64 `json:"probe_speed,omitempty"`
}

// Model is a goodput model by its parameters: a fitted function under
// its batch-size bounds (model.GoodputCache), or a projection of another
// model onto a GPU type (model.Projected).
type Model struct {
	Func   *model.GoodputFunc `json:"func,omitempty"`
	Bounds *model.Bounds      `json:"bounds,omitempty"`
	// Bootstrapped marks a function predicted for a type the job has not
	// run on (model.BootstrappedCache), not fitted there.
	Bootstrapped bool        `json:"bootstrapped,omitempty"`
	Projected    *Projection `json:"projected,omitempty"`
}

// Projection is model.Projected's parameters.
type Projection struct {
	Source            *Model  `json:"source"`
	Ratio             float64 `json:"ratio"`
	SourceGPUsPerNode int     `json:"source_gpus_per_node"`
}

// Oracle is what Optimus+Oracle read of a job: its remaining iterations
// and its step time at each replica count up to its MaxReplicas
// (StepTime[k-1] for k GPUs).
type Oracle struct {
	RemainingIterations float64   `json:"remaining_iterations"`
	StepTime            []float64 `json:"step_time"`
}

// replayedOracle answers as the recorded Oracle.
type replayedOracle struct{ o Oracle }

func (r replayedOracle) RemainingIterations() float64 { return r.o.RemainingIterations }

func (r replayedOracle) StepTime(replicas int) float64 {
	if replicas < 1 || replicas > len(r.o.StepTime) {
		return 0
	}
	return r.o.StepTime[replicas-1]
}

// encodeModel returns m's parameters, or an error naming its type when
// it is not a model this package knows.
func encodeModel(m policy.GoodputModel) (*Model, error) {
	switch m := m.(type) {
	case nil:
		return nil, nil
	case *model.GoodputCache:
		f, b := m.Func(), m.Bounds()
		return &Model{Func: &f, Bounds: &b}, nil
	case *model.BootstrappedCache:
		f, b := m.Func(), m.Bounds()
		return &Model{Func: &f, Bounds: &b, Bootstrapped: true}, nil
	case *model.Projected:
		src, ok := m.Source.(policy.GoodputModel)
		if !ok {
			return nil, fmt.Errorf("projected model's source is a %T", m.Source)
		}
		s, err := encodeModel(src)
		if err != nil {
			return nil, err
		}
		return &Model{Projected: &Projection{Source: s, Ratio: m.Ratio, SourceGPUsPerNode: m.SourceGPUsPerNode}}, nil
	default:
		return nil, fmt.Errorf("a goodput model of type %T cannot be recorded", m)
	}
}

// decode returns the model m describes.
func (m *Model) decode() (policy.GoodputModel, error) {
	switch {
	case m == nil:
		return nil, nil
	case m.Func != nil && m.Bounds != nil && m.Bootstrapped:
		return &model.BootstrappedCache{GoodputCache: model.NewGoodputCache(*m.Func, *m.Bounds)}, nil
	case m.Func != nil && m.Bounds != nil:
		return model.NewGoodputCache(*m.Func, *m.Bounds), nil
	case m.Projected != nil:
		src, err := m.Projected.Source.decode()
		if err != nil {
			return nil, err
		}
		if src == nil {
			return nil, fmt.Errorf("projected model without a source")
		}
		return &model.Projected{Source: src, Ratio: m.Projected.Ratio, SourceGPUsPerNode: m.Projected.SourceGPUsPerNode}, nil
	default:
		return nil, fmt.Errorf("model has neither a function with bounds nor a projection")
	}
}

// New returns the record of a round of policy name (made with settings
// s) that decided out from in. It copies what the caller may change
// later (the nodes, the allocations); the carry, never changed once a
// policy returned it, is kept as it is.
func New(name string, s registry.Settings, in policy.Input, out policy.Allocations) (*Round, error) {
	r := &Round{Version: Version, Policy: name, Settings: registry.Relevant(name, s), Decision: copyAlloc(out), carry: in.Carry}
	ri := Input{Now: in.Now, Round: in.Round, Seed: in.Seed, Nodes: slices.Clone(in.Nodes), Current: copyAlloc(in.Current)}
	for _, j := range in.Jobs {
		rj := Job{ID: j.ID, Submitted: j.Submitted, Age: j.Age, AttainedService: j.AttainedService,
			MinReplicas: j.MinReplicas, MaxReplicas: j.MaxReplicas, NumRestarts: j.NumRestarts,
			RestartTime: j.RestartTime, Restoring: j.Restoring, Held: j.Held,
			TypedMaxReplicas: j.TypedMaxReplicas, ProbeSpeed: j.ProbeSpeed}
		var err error
		if rj.Goodput, err = encodeModel(j.Goodput); err != nil {
			return nil, fmt.Errorf("failed to record round %d: job %s: %w", in.Round, j.ID, err)
		}
		for _, t := range sortedKeys(j.TypedGoodput) {
			m, err := encodeModel(j.TypedGoodput[t])
			if err != nil {
				return nil, fmt.Errorf("failed to record round %d: job %s on %s: %w", in.Round, j.ID, t, err)
			}
			if rj.TypedGoodput == nil {
				rj.TypedGoodput = map[string]*Model{}
			}
			rj.TypedGoodput[t] = m
		}
		if j.Oracle != nil {
			o := &Oracle{RemainingIterations: j.Oracle.RemainingIterations()}
			for k := 1; k <= j.MaxReplicas; k++ {
				o.StepTime = append(o.StepTime, j.Oracle.StepTime(k))
			}
			rj.Oracle = o
		}
		ri.Jobs = append(ri.Jobs, rj)
	}
	r.Input = ri
	return r, nil
}

// PolicyInput returns the recorded input as the policy sees it.
func (r *Round) PolicyInput() (policy.Input, error) {
	in := policy.Input{Now: r.Input.Now, Round: r.Input.Round, Seed: r.Input.Seed, Nodes: r.Input.Nodes, Current: r.Input.Current}
	if in.Current == nil {
		in.Current = policy.Allocations{}
	}
	in.Carry = r.carry
	if in.Carry == nil {
		carry, err := registry.DecodeCarry(r.Policy, r.Input.Carry)
		if err != nil {
			return policy.Input{}, err
		}
		in.Carry = carry
	}
	var err error
	for _, rj := range r.Input.Jobs {
		j := policy.Job{ID: rj.ID, Submitted: rj.Submitted, Age: rj.Age, AttainedService: rj.AttainedService,
			MinReplicas: rj.MinReplicas, MaxReplicas: rj.MaxReplicas, NumRestarts: rj.NumRestarts,
			RestartTime: rj.RestartTime, Restoring: rj.Restoring, Held: rj.Held,
			TypedMaxReplicas: rj.TypedMaxReplicas, ProbeSpeed: rj.ProbeSpeed}
		if j.Goodput, err = rj.Goodput.decode(); err != nil {
			return policy.Input{}, fmt.Errorf("job %s: %w", rj.ID, err)
		}
		for t, m := range rj.TypedGoodput {
			g, err := m.decode()
			if err != nil {
				return policy.Input{}, fmt.Errorf("job %s on %s: %w", rj.ID, t, err)
			}
			if j.TypedGoodput == nil {
				j.TypedGoodput = map[string]policy.GoodputModel{}
			}
			j.TypedGoodput[t] = g
		}
		if rj.Oracle != nil {
			j.Oracle = replayedOracle{o: *rj.Oracle}
		}
		in.Jobs = append(in.Jobs, j)
	}
	return in, nil
}

// Replay decides the recorded round again with a policy made afresh
// from the recorded name and settings, and returns its decision and the
// differences from the recorded one (none: the same decision).
func (r *Round) Replay(ctx context.Context) (policy.Allocations, []string, error) {
	if r.Version != Version {
		return nil, nil, fmt.Errorf("record version %d, this pollux reads version %d", r.Version, Version)
	}
	pol, err := registry.New(r.Policy, r.Settings)
	if err != nil {
		return nil, nil, err
	}
	in, err := r.PolicyInput()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read round %d: %w", r.Input.Round, err)
	}
	out, err := pol.Optimize(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to decide round %d again: %w", r.Input.Round, err)
	}
	return out, Diff(r.Decision, out), nil
}

// Diff lists, job by job in ID order, where decision got differs from
// want ("job: recorded [...], replayed [...]"); nil when they are the same.
func Diff(want, got policy.Allocations) []string {
	ids := map[string]bool{}
	for id := range want {
		ids[id] = true
	}
	for id := range got {
		ids[id] = true
	}
	var out []string
	for _, id := range sortedKeys(ids) {
		if !policy.Equal(want[id], got[id]) {
			out = append(out, fmt.Sprintf("%s: recorded [%s], replayed [%s]", id, strings.Join(want[id], " "), strings.Join(got[id], " ")))
		}
	}
	return out
}

// Read reads a record from file path.
func Read(path string) (*Round, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Round
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a round record: %w", path, err)
	}
	if r.Version != Version {
		return nil, fmt.Errorf("%s: record version %d, this pollux reads version %d", path, r.Version, Version)
	}
	return &r, nil
}

// WriteFile writes the record as indented JSON to path, through a
// temporary file renamed into place, so that a reader never sees half a
// record.
func (r *Round) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("failed to encode round %d: %w", r.Input.Round, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// FileName is the name of round n's record in a directory of records.
func FileName(n int64) string { return fmt.Sprintf("round-%08d.json", n) }

// copyAlloc returns a copy of a (its slices too).
func copyAlloc(a policy.Allocations) policy.Allocations {
	out := make(policy.Allocations, len(a))
	for id, nodes := range a {
		out[id] = slices.Clone(nodes)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
