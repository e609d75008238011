package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Config is one tuned (num_replicas, batch_size) choice for an application:
// the artifact draws each job's pair uniformly from its application's
// get_configurations(0.5, 0.8) list ("TunedJobs", pollux-reference.md §4).
type Config struct {
	// Replicas is the GPU count (num_replicas column).
	Replicas int
	// BatchSize is the total batch size (batch_size column).
	BatchSize int
}

// Trace filters and application classes of the artifact's
// simulator/workload.py (pollux-reference.md §4).
const (
	// minTraceDuration drops jobs shorter than a minute (seconds).
	minTraceDuration = 60
	// maxTraceGPUTime drops jobs of 1000 GPU·hours or more (GPU·seconds).
	maxTraceGPUTime = 1000 * 3600
	// gpuHour is one GPU·hour in GPU·seconds.
	gpuHour = 3600
)

// PCG stream constants. The artifact seeds its main generator with seed
// and the one that turns half of the deepspeech2 jobs into bert jobs with
// seed+3; here both use seed, on separate PCG streams 0 and 3, so that the
// bert coin flips do not shift the other draws.
const (
	mainStream = 0
	bertStream = 3
)

// Generate samples n jobs from a Philly trace the way the Pollux artifact's
// simulator/workload.py builds its workloads (pollux-reference.md §4;
// Pollux, OSDI '21, §5.3):
//
//   - eligible trace rows have duration ≥ 60 s and gpu_time < 1000 GPU·h,
//     and a clock time of day, after moving every timestamp back by
//     startHours, below durationHours: the window [start, start+duration)
//     hours of the day, pooled over every day of the trace, as workload.py
//     does with its timestamp shift and dt.hour filter (with whole-hour
//     arguments the two windows are identical; fractional hours are
//     honoured to the second here, where workload.py compares whole hours);
//   - n distinct rows are sampled uniformly without replacement;
//   - the application follows the row's GPU time: below 1 GPU·h cifar10 or
//     ncf with equal odds; 1–10 GPU·h deepspeech2, half of which (by a
//     separate random stream) become bert; 10–100 GPU·h yolov3; 100 GPU·h
//     and more imagenet;
//   - (num_replicas, batch_size) is drawn uniformly from configs(app) (for
//     a job switched to bert, drawn again from configs("bert") on the
//     separate stream);
//   - the submission time is the row's shifted time of day in whole seconds,
//     i.e. seconds from the window start;
//   - jobs are sorted by time (stable, so equal times keep the sampling
//     order) and named "<app>-<index>" in that order.
//
// The artifact's workload-k.csv files are generate(160, start=2,
// duration=8, seed=k). Generate is deterministic for a seed (math/rand/v2
// PCG), but it cannot reproduce numpy's and Python's random streams, so it
// does not reproduce those files: it draws workloads from the same
// distribution, not the same workloads. workload.py also draws a Philly
// GPU count for yolov3 and imagenet jobs that it never uses (its
// "realistic" variant is commented out); Generate skips that draw.
//
// It returns an error when n < 1, the window is not finite and positive,
// fewer than n rows are eligible, or configs returns no valid
// configuration for an application it needs. It panics if configs is nil.
func Generate(philly []PhillyJob, configs func(app string) []Config, n int, startHours, durationHours float64, seed uint64) ([]Job, error) {
	if configs == nil {
		panic("workload: Generate called with nil configs")
	}
	if n < 1 {
		return nil, fmt.Errorf("failed to generate workload: number of jobs must be at least 1, got %d", n)
	}
	if math.IsNaN(startHours) || math.IsInf(startHours, 0) {
		return nil, fmt.Errorf("failed to generate workload: start hour must be finite, got %v", startHours)
	}
	if !(durationHours > 0) || math.IsInf(durationHours, 0) {
		return nil, fmt.Errorf("failed to generate workload: window duration must be a finite number of hours > 0, got %v", durationHours)
	}

	type candidate struct {
		row  int     // index into philly
		time float64 // seconds from the window start
	}
	// Only the time of day matters, so the shift is taken modulo one day
	// (which also keeps it within time.Duration's range).
	shift := time.Duration(math.Round(math.Mod(startHours, 24) * float64(time.Hour)))
	window := durationHours * 3600
	var eligible []candidate
	for i, p := range philly {
		if p.Duration < minTraceDuration || !(p.GPUTime < maxTraceGPUTime) {
			continue
		}
		h, m, s := p.Timestamp.UTC().Add(-shift).Clock()
		tod := float64(h*3600 + m*60 + s)
		if tod < window {
			eligible = append(eligible, candidate{row: i, time: tod})
		}
	}
	if len(eligible) < n {
		return nil, fmt.Errorf("failed to generate workload: %d of %d trace rows are eligible (duration ≥ %d s, gpu_time < %d GPU·h, in the %v h window from hour %v), need %d",
			len(eligible), len(philly), minTraceDuration, maxTraceGPUTime/gpuHour, durationHours, startHours, n)
	}

	rng := rand.New(rand.NewPCG(seed, mainStream))
	bertRNG := rand.New(rand.NewPCG(seed, bertStream))

	// Partial Fisher–Yates shuffle: the first n entries become a uniform
	// sample without replacement, in random order (as pandas' sample).
	for i := range n {
		j := i + rng.IntN(len(eligible)-i)
		eligible[i], eligible[j] = eligible[j], eligible[i]
	}

	cache := make(map[string][]Config)
	pick := func(app string, r *rand.Rand) (Config, error) {
		cs, ok := cache[app]
		if !ok {
			cs = configs(app)
			for k, c := range cs {
				if c.Replicas < 1 || c.BatchSize < 1 {
					return Config{}, fmt.Errorf("failed to generate workload: configuration %d of %q is invalid: %+v", k, app, c)
				}
			}
			cache[app] = cs
		}
		if len(cs) == 0 {
			return Config{}, fmt.Errorf("failed to generate workload: no configurations for application %q", app)
		}
		return cs[r.IntN(len(cs))], nil
	}

	jobs := make([]Job, 0, n)
	for _, c := range eligible[:n] {
		app := applicationByGPUTime(philly[c.row].GPUTime)
		if app == "" {
			app = [2]string{"cifar10", "ncf"}[rng.IntN(2)]
		}
		cfg, err := pick(app, rng)
		if err != nil {
			return nil, err
		}
		if app == "deepspeech2" && bertRNG.IntN(2) == 1 {
			app = "bert"
			if cfg, err = pick(app, bertRNG); err != nil {
				return nil, err
			}
		}
		jobs = append(jobs, Job{Time: c.time, Application: app, NumReplicas: cfg.Replicas, BatchSize: cfg.BatchSize})
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	for i := range jobs {
		jobs[i].Name = jobs[i].Application + "-" + strconv.Itoa(i)
	}
	return jobs, nil
}

// applicationByGPUTime maps a trace job's GPU time (GPU·seconds) to the
// application workload.py assigns it, or "" for the class below 1 GPU·h,
// which is split at random between cifar10 and ncf. The 1–10 GPU·h class is
// returned as deepspeech2 before the bert switch.
func applicationByGPUTime(gpuTime float64) string {
	switch {
	case gpuTime < 1*gpuHour:
		return ""
	case gpuTime < 10*gpuHour:
		return "deepspeech2"
	case gpuTime < 100*gpuHour:
		return "yolov3"
	default:
		return "imagenet"
	}
}
