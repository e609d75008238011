package apps

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
)

// GPUType is one GPU type of the Sia artifact's profiles (data.SiaTraces):
// the simulator's name for it and the suffix of its profile files.
type GPUType struct {
	// Name is the type's name in cluster specs and policy.Node.Type.
	Name string
	// Suffix is the artifact's name, the suffix of placements-<Suffix>.csv.
	Suffix string
	// Hardware describes the GPU.
	Hardware string
}

// SiaGPUTypes lists the GPU types of the Sia artifact's profiles, in the
// order of its README (the artifact's dgx profiles, superseded by dgx-ext,
// are not used).
var SiaGPUTypes = []GPUType{
	{Name: "t4", Suffix: "aws", Hardware: "NVIDIA T4 (AWS g4dn.12xlarge)"},
	{Name: "v100", Suffix: "azure", Hardware: "NVIDIA V100 (Azure ND40rs_v2)"},
	{Name: "a100", Suffix: "dgx-ext", Hardware: "NVIDIA A100 40 GB (DGX A100, NVLink)"},
	{Name: "rtx6000", Suffix: "quad", Hardware: "NVIDIA Quadro RTX 6000"},
	{Name: "rtx2080ti", Suffix: "rtx", Hardware: "NVIDIA GeForce RTX 2080 Ti"},
}

// Constants selects whose application constants LoadTypedAll uses where
// the two artifacts differ.
type Constants int

const (
	// PolluxConstants: the Pollux artifact's (yolov3's micro-batch at most
	// 8 on every type), so that a t4-only cluster replays today's
	// simulation exactly.
	PolluxConstants Constants = iota
	// SiaConstants: the Sia artifact's applications.py (each type's
	// micro-batch bounds from its own placements file, except deepspeech2
	// on rtx2080ti at most 57).
	SiaConstants
)

// LoadTypedAll loads the six artifact applications from fsys (rooted like
// data.SiaTraces(): one directory per application holding
// placements-<suffix>.csv and scalability-<suffix>.csv per GPU type) with
// one throughput table per type of SiaGPUTypes that has a profile, the
// default type t4. Each table replays the embedded SciPy tessellation of
// its points (qhull/<app>-<type>.txt.gz, or qhull/<app>.txt.gz for t4)
// where one is recorded and matches, and is triangulated in Go otherwise.
// The pipeline-parallel gpt_pmp profiles are not loaded: the simulator
// does not model pipeline parallelism and no workload uses them.
func LoadTypedAll(fsys fs.FS, c Constants) (map[string]*Application, error) {
	out := make(map[string]*Application, len(artifactEpochs))
	for _, name := range Names() {
		opts := Options{MaxEpochs: artifactEpochs[name], DefaultType: "t4"}
		for _, t := range SiaGPUTypes {
			if _, err := fs.Stat(fsys, path.Join(name, "placements-"+t.Suffix+".csv")); err != nil {
				continue
			}
			tf := TypeFiles{Type: t.Name, Suffix: t.Suffix}
			switch {
			case c == PolluxConstants && name == "yolov3":
				tf.MaxLocalBsz = 8
			case c == SiaConstants && name == "deepspeech2" && t.Name == "rtx2080ti":
				tf.MaxLocalBsz = 57
			}
			refName := name + "-" + t.Name
			if t.Name == "t4" {
				refName = name
			}
			ref, err := ReferenceTessellation(refName)
			if err != nil {
				return nil, err
			}
			tf.Reference = ref
			opts.Types = append(opts.Types, tf)
		}
		if len(opts.Types) == 0 {
			return nil, fmt.Errorf("failed to load application %s: no placements-<type>.csv for any GPU type", name)
		}
		if opts.Types[0].Type != "t4" {
			opts.DefaultType = opts.Types[0].Type
		}
		a, err := Load(fsys, name, opts)
		if errors.Is(err, ErrReferenceMismatch) {
			// Other profiles than the recorded ones: triangulate in Go.
			for j := range opts.Types {
				opts.Types[j].Reference = nil
			}
			a, err = Load(fsys, name, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("failed to load application %s: %w", name, err)
		}
		out[name] = a
	}
	return out, nil
}

// OneGPUThroughput is the Sia artifact's "atomic" throughput of the
// application on gpuType, in examples per second: the largest local_bsz
// divided by the largest step_time among the placements rows on one GPU
// (sia-simulator/cluster.py, compute_throughput_ratios and
// compute_throughputs; the two maxima are taken independently, as there).
// Sia projects a job's goodput from a type it has a model on to another by
// the ratio of these. It returns 0 when the type has no one-GPU rows.
func (a *Application) OneGPUThroughput(gpuType string) float64 {
	p, err := a.table(gpuType)
	if err != nil {
		return 0
	}
	var maxLocal int
	var maxStep float64
	for _, rows := range p.placements {
		for _, r := range rows {
			if r.numReplicas() == 1 {
				maxLocal = max(maxLocal, r.localBsz)
				maxStep = max(maxStep, r.stepTime)
			}
		}
	}
	if maxStep <= 0 {
		return 0
	}
	return float64(maxLocal) / maxStep
}

// Measurement is one row of a placements file.
type Measurement struct {
	// Placement holds the GPUs per node.
	Placement []int
	// LocalBsz is the per-GPU micro-batch.
	LocalBsz int
	// StepTime and SyncTime are the measured seconds of a synchronising
	// step and of its gradient synchronisation.
	StepTime, SyncTime float64
}

// Measured returns the rows of the placements file of gpuType ("" = the
// default type), ordered by placement and local_bsz.
func (a *Application) Measured(gpuType string) []Measurement {
	p, err := a.table(gpuType)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(p.placements))
	for id := range p.placements {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []Measurement
	for _, id := range ids {
		for _, r := range p.placements[id] {
			pl := make([]int, len(r.placement))
			for i, c := range r.placement {
				pl[i] = int(c - '0')
			}
			out = append(out, Measurement{Placement: pl, LocalBsz: r.localBsz, StepTime: r.stepTime, SyncTime: r.syncTime})
		}
	}
	return out
}
