package results

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot file names written by WritePlots.
const (
	// JCTCDFFile is the CDF of job completion times, one line per run.
	JCTCDFFile = "jct-cdf.png"
	// GPUsInUseFile is the GPUs in use over time, one line per run.
	GPUsInUseFile = "gpus-in-use.png"
	// jobGPUsSuffix ends each run's per-job heat map file name.
	jobGPUsSuffix = "-job-gpus.png"
)

// Plot sizes. PNGs are rendered at vgimg's default 96 dots per inch.
const (
	lineWidth, lineHeight = 9 * vg.Inch, 5.5 * vg.Inch
	heatWidth, heatHeight = 12 * vg.Inch, 8 * vg.Inch
	colorBarWidth         = 1.1 * vg.Inch
	// maxHeatColumns caps the heat map's time columns; longer timelines
	// are grouped (see jobGPUGrid).
	maxHeatColumns = 720
)

// WritePlots writes PNG plots of runs into dir (created if missing):
//
//   - jct-cdf.png: the empirical CDF of job completion time over each
//     run's completed jobs, log-scaled time axis, one line per run;
//   - gpus-in-use.png: GPUs in use at each round, one line per run, with
//     the cluster's capacity;
//   - cluster-size.png, when a run was autoscaled: its GPUs up and in
//     use over time, per run;
//   - <policy>-job-gpus.png per run: a heat map of every job's GPU count
//     over time (jobs on the y axis in submission order, first at the top;
//     time on the x axis; colour = GPUs on a log₂ scale; grey = submitted
//     but holding no GPU; white = not yet submitted or finished), readable
//     with hundreds of jobs. If several runs share a
//     policy, their names become <policy>-<workload>-job-gpus.png (and
//     "-<index>" is appended if that is not unique either); characters
//     other than letters, digits, '.', '_' and '-' become '_'.
//
// It returns an error if runs is empty or a file cannot be written.
func WritePlots(dir string, runs []Run) error {
	if len(runs) == 0 {
		return errors.New("failed to write plots: no runs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create plot directory: %w", err)
	}
	title := workloadTitle(runs)

	cdf, err := jctCDFPlot(runs, title)
	if err != nil {
		return err
	}
	if err := savePlot(cdf, lineWidth, lineHeight, filepath.Join(dir, JCTCDFFile)); err != nil {
		return err
	}
	if err := savePlot(gpusInUsePlot(runs, title), lineWidth, lineHeight, filepath.Join(dir, GPUsInUseFile)); err != nil {
		return err
	}
	if slices.ContainsFunc(runs, func(r Run) bool { return r.Autoscaled }) {
		if err := savePlot(clusterSizePlot(runs, title), lineWidth, lineHeight, filepath.Join(dir, ClusterSizeFile)); err != nil {
			return err
		}
	}
	for i, name := range jobGPUsFileNames(runs) {
		if err := writeJobGPUs(filepath.Join(dir, name), runs[i]); err != nil {
			return err
		}
	}
	return nil
}

// jctCDFPlot draws the empirical CDF F(x) = #{JCT ≤ x}/#completed of each
// run as a step line.
func jctCDFPlot(runs []Run, title string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Job completion time CDF: " + title
	p.X.Label.Text = "job completion time (s, log scale)"
	p.Y.Label.Text = "fraction of completed jobs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, r := range runs {
		var jcts []float64
		for _, j := range r.Jobs {
			if j.Completed {
				// A log axis cannot show 0; sub-second JCTs are drawn at 1 s.
				jcts = append(jcts, math.Max(j.JCT(), 1))
			}
		}
		if len(jcts) == 0 {
			continue
		}
		slices.Sort(jcts)
		pts := make(plotter.XYs, 0, len(jcts)+1)
		pts = append(pts, plotter.XY{X: jcts[0], Y: 0})
		for k, x := range jcts {
			pts = append(pts, plotter.XY{X: x, Y: float64(k+1) / float64(len(jcts))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("failed to plot JCT CDF of %s: %w", runLabel(runs, i), err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d/%d completed)", runLabel(runs, i), len(jcts), len(r.Jobs)), l)
		xmin, xmax = math.Min(xmin, jcts[0]), math.Max(xmax, jcts[len(jcts)-1])
	}
	if math.IsInf(xmin, 0) { // nothing completed: keep the log axis valid
		xmin, xmax = 1, 10
	}
	p.X.Min, p.X.Max = xmin, math.Max(xmax, 10*xmin)
	return p, nil
}

// gpusInUsePlot draws GPUsInUse against time (hours) for each run, as a
// step line (an allocation holds until the next round), and the capacity.
func gpusInUsePlot(runs []Run, title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = "GPUs in use: " + title
	p.X.Label.Text = "time (h)"
	p.Y.Label.Text = "GPUs in use"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())

	capacity := 0
	tmax := 0.0
	for i, r := range runs {
		capacity = max(capacity, r.TotalGPUs)
		if len(r.Timeline) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(r.Timeline))
		for k, s := range r.Timeline {
			pts[k] = plotter.XY{X: s.Time / 3600, Y: float64(s.GPUsInUse)}
			tmax = math.Max(tmax, pts[k].X)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			// Non-finite sample times: leave the run out rather than fail
			// the whole report.
			continue
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(runLabel(runs, i), l)
	}
	if capacity > 0 {
		c, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(capacity)}, {X: math.Max(tmax, 1e-3), Y: float64(capacity)}})
		if err == nil {
			c.Color = color.Gray{Y: 0x80}
			c.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			p.Add(c)
			p.Legend.Add(fmt.Sprintf("capacity (%d GPUs)", capacity), c)
		}
		p.Y.Max = float64(capacity) * 1.25 // room for the legend above the capacity line
	}
	return p
}

// jobGPUGrid is a plotter.GridXYZ of GPUs per job (rows) per time column.
// Row 0 is the bottom of the plot and holds the last submitted job.
type jobGPUGrid struct {
	times []float64   // column centres, hours
	z     [][]float64 // z[col][row]: GPUs, 0 waiting, NaN inactive
	rows  int
}

// Dims returns the number of time columns and job rows.
func (g *jobGPUGrid) Dims() (c, r int) { return len(g.times), g.rows }

// Z returns the GPU count of row r's job in column c.
func (g *jobGPUGrid) Z(c, r int) float64 { return g.z[c][r] }

// X returns column c's time in hours.
func (g *jobGPUGrid) X(c int) float64 { return g.times[c] }

// Y returns row r's position.
func (g *jobGPUGrid) Y(r int) float64 { return float64(r) }

// newJobGPUGrid builds the heat map data of a run. With more samples than
// maxHeatColumns, consecutive samples are grouped into one column showing
// the largest GPU count in the group (so that a short allocation stays
// visible) at the group's mean time. It also returns the largest count.
func newJobGPUGrid(r Run) (*jobGPUGrid, int) {
	order := make([]int, len(r.Jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch sa, sb := r.Jobs[a].Submitted, r.Jobs[b].Submitted; {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	})
	n := len(r.Jobs)
	per := max(1, (len(r.Timeline)+maxHeatColumns-1)/maxHeatColumns)
	cols := (len(r.Timeline) + per - 1) / per
	g := &jobGPUGrid{times: make([]float64, cols), z: make([][]float64, cols), rows: n}
	peak := 0
	for c := range cols {
		group := r.Timeline[c*per : min((c+1)*per, len(r.Timeline))]
		col := make([]float64, n)
		for row := range col {
			col[row] = math.NaN()
		}
		sum := 0.0
		for _, s := range group {
			sum += s.Time
			for k, ji := range order {
				j := r.Jobs[ji]
				row := n - 1 - k
				v, ok := s.JobGPUs[j.Name]
				active := j.Submitted <= s.Time && (!j.Completed || s.Time < j.Completion)
				if !(ok && v > 0) && !active {
					continue
				}
				if math.IsNaN(col[row]) || float64(v) > col[row] {
					col[row] = float64(v)
				}
				peak = max(peak, v)
			}
		}
		g.times[c] = sum / float64(len(group)) / 3600
		g.z[c] = col
	}
	return g, peak
}

// jobTicks labels the y axis of the heat map with submission ranks
// (1 = first submitted, drawn at the top).
type jobTicks struct{ n int }

// Ticks implements plot.Ticker with about ten labelled ranks.
func (t jobTicks) Ticks(_, _ float64) []plot.Tick {
	if t.n == 0 {
		return nil
	}
	step := 1
	for _, s := range []int{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000} {
		step = s
		if t.n/s <= 10 {
			break
		}
	}
	ticks := []plot.Tick{{Value: float64(t.n - 1), Label: "1"}}
	for rank := step; rank <= t.n; rank += step {
		if rank > 1 {
			ticks = append(ticks, plot.Tick{Value: float64(t.n - rank), Label: strconv.Itoa(rank)})
		}
	}
	return ticks
}

// log2Grid shows a jobGPUGrid on a log₂ colour scale, so that 1, 2, 4
// and 8 GPUs stay distinguishable next to a 64-GPU job: n > 0 GPUs map to
// log₂ n, 0 GPUs (waiting) to −1 (below the palette), inactive stays NaN.
type log2Grid struct{ *jobGPUGrid }

// Z returns the log₂ GPU count of row r's job in column c.
func (g log2Grid) Z(c, r int) float64 {
	switch v := g.jobGPUGrid.Z(c, r); {
	case math.IsNaN(v):
		return v
	case v <= 0:
		return -1
	default:
		return math.Log2(v)
	}
}

// gpuTicks labels a log₂ colour bar with GPU counts: the powers of two up
// to the peak, and the peak itself when it is not one and not too close.
type gpuTicks struct{ peak int }

// Ticks implements plot.Ticker.
func (t gpuTicks) Ticks(_, _ float64) []plot.Tick {
	var ticks []plot.Tick
	for v := 1; v <= t.peak; v *= 2 {
		ticks = append(ticks, plot.Tick{Value: math.Log2(float64(v)), Label: strconv.Itoa(v)})
	}
	top := math.Log2(float64(t.peak))
	if len(ticks) > 0 && top-ticks[len(ticks)-1].Value >= 0.3 {
		ticks = append(ticks, plot.Tick{Value: top, Label: strconv.Itoa(t.peak)})
	}
	return ticks
}

// gpuColorMap maps log₂ GPU counts in [0, log₂ peak] to colours: light
// yellow for one GPU through green and blue to dark purple for the peak (a
// viridis-like map whose luminance falls as the count grows, readable on
// white).
func gpuColorMap(peak int) (palette.ColorMap, error) {
	cm, err := moreland.NewLuminance([]color.Color{
		color.NRGBA{R: 0x44, G: 0x01, B: 0x54, A: 0xff},
		color.NRGBA{R: 0x3b, G: 0x52, B: 0x8b, A: 0xff},
		color.NRGBA{R: 0x21, G: 0x91, B: 0x8c, A: 0xff},
		color.NRGBA{R: 0x5e, G: 0xc9, B: 0x62, A: 0xff},
		color.NRGBA{R: 0xfd, G: 0xe7, B: 0x25, A: 0xff},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to build GPU colour map: %w", err)
	}
	rev := palette.Reverse(cm)
	rev.SetMin(0)
	rev.SetMax(math.Log2(float64(max(peak, 2))))
	return rev, nil
}

// writeJobGPUs renders a run's per-job GPU heat map with a colour bar.
func writeJobGPUs(path string, r Run) error {
	grid, peak := newJobGPUGrid(r)
	cm, err := gpuColorMap(peak)
	if err != nil {
		return err
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("GPUs per job: %s on %s (%d jobs, %d GPUs)", r.Policy, r.Workload, len(r.Jobs), r.TotalGPUs)
	p.X.Label.Text = "time (h)    grey: submitted, no GPU;  white: not submitted or finished"
	p.Y.Label.Text = "job (submission order, first at top)"
	p.Y.Tick.Marker = jobTicks{n: len(r.Jobs)}
	p.X.Padding, p.Y.Padding = 0, 0
	if cols, rows := grid.Dims(); cols > 0 && rows > 0 {
		h := plotter.NewHeatMap(log2Grid{grid}, cm.Palette(256))
		h.Min, h.Max = cm.Min(), cm.Max()
		h.Underflow = color.Gray{Y: 0xd0} // 0 GPUs: waiting
		h.NaN = nil                       // inactive: background
		p.Add(h)
	} else {
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	}

	bar := plot.New()
	bar.Title.Text = "GPUs"
	bar.HideX()
	bar.Y.Padding = 0
	bar.Y.Tick.Marker = gpuTicks{peak: max(peak, 2)}
	bar.Add(&plotter.ColorBar{ColorMap: cm, Vertical: true})

	img := vgimg.New(heatWidth, heatHeight)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -colorBarWidth, 0, 0))
	// Line the bar up with the heat map's data area: skip the x-axis
	// labels at the bottom and the title at the top.
	bar.Draw(draw.Crop(dc, heatWidth-colorBarWidth+0.25*vg.Inch, -0.35*vg.Inch, 0.42*vg.Inch, -0.05*vg.Inch))

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("failed to write plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write plot %s: %w", path, err)
	}
	return nil
}

// savePlot renders p as a PNG file.
func savePlot(p *plot.Plot, w, h vg.Length, path string) error {
	if err := p.Save(w, h, path); err != nil {
		return fmt.Errorf("failed to write plot %s: %w", path, err)
	}
	return nil
}

// workloadTitle names the workload(s) of runs for plot titles.
func workloadTitle(runs []Run) string {
	var names []string
	for _, r := range runs {
		if !slices.Contains(names, r.Workload) {
			names = append(names, r.Workload)
		}
	}
	return strings.Join(names, ", ")
}

// runLabel names run i in a legend: its policy, plus the workload when the
// runs span several workloads.
func runLabel(runs []Run, i int) string {
	for _, r := range runs {
		if r.Workload != runs[i].Workload {
			return runs[i].Policy + " / " + runs[i].Workload
		}
	}
	return runs[i].Policy
}

// jobGPUsFileNames returns a unique heat-map file name per run.
func jobGPUsFileNames(runs []Run) []string {
	policyCount := make(map[string]int)
	for _, r := range runs {
		policyCount[sanitize(r.Policy)]++
	}
	names := make([]string, len(runs))
	used := make(map[string]bool)
	for i, r := range runs {
		base := sanitize(r.Policy)
		if policyCount[base] > 1 {
			base += "-" + sanitize(r.Workload)
		}
		name := base + jobGPUsSuffix
		if used[name] {
			name = base + "-" + strconv.Itoa(i) + jobGPUsSuffix
		}
		used[name] = true
		names[i] = name
	}
	return names
}

// sanitize makes s safe as part of a file name.
func sanitize(s string) string {
	if s == "" {
		return "run"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}
