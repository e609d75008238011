package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// chart is a line chart drawn as inline SVG by the page template. All of
// its strings are numbers or constant labels.
type chart struct {
	Width, Height  int
	Left, Top      int // plot area origin
	PlotW, PlotH   int
	Path           string // the curve, "M x y L x y ..."
	Dots           []chartDot
	Mark           *chartDot // the chosen point
	XTicks, YTicks []chartTick
	XLabel, YLabel string
	// ID names the chart for tests (data-chart).
	ID string
}

type chartDot struct {
	X, Y  float64
	Title string
}

type chartTick struct {
	Pos   float64
	Label string
}

// newChart scales points (xs[i], ys[i]) into a width × height SVG; mark
// is the index of the chosen point or -1. With logX the x axis is
// logarithmic (batch sizes).
func newChart(id string, xs, ys []float64, mark int, logX bool, xLabel, yLabel string, titles []string) *chart {
	c := &chart{ID: id, Width: 460, Height: 240, Left: 52, Top: 12, XLabel: xLabel, YLabel: yLabel}
	c.PlotW, c.PlotH = c.Width-c.Left-14, c.Height-c.Top-44
	if len(xs) == 0 {
		return c
	}
	tx := func(x float64) float64 { return x }
	if logX {
		tx = math.Log
	}
	x0, x1 := tx(xs[0]), tx(xs[len(xs)-1])
	if x1 <= x0 {
		x1 = x0 + 1
	}
	yMax := 0.0
	for _, y := range ys {
		if y > yMax && !math.IsInf(y, 0) {
			yMax = y
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	yMax = niceCeil(yMax)
	px := func(x float64) float64 { return float64(c.Left) + (tx(x)-x0)/(x1-x0)*float64(c.PlotW) }
	py := func(y float64) float64 { return float64(c.Top) + (1-y/yMax)*float64(c.PlotH) }
	var b strings.Builder
	for i := range xs {
		y := ys[i]
		if math.IsNaN(y) || math.IsInf(y, 0) {
			y = 0
		}
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, px(xs[i]), py(y))
		d := chartDot{X: round1(px(xs[i])), Y: round1(py(y))}
		if i < len(titles) {
			d.Title = titles[i]
		}
		c.Dots = append(c.Dots, d)
		if i == mark {
			m := d
			c.Mark = &m
		}
	}
	c.Path = strings.TrimSpace(b.String())
	for i := 0; i <= 4; i++ {
		v := yMax * float64(i) / 4
		c.YTicks = append(c.YTicks, chartTick{Pos: round1(py(v)), Label: strconv.FormatFloat(v, 'g', 3, 64)})
	}
	// At most about 8 x ticks, at data points.
	step := max(1, (len(xs)+7)/8)
	for i := 0; i < len(xs); i += step {
		c.XTicks = append(c.XTicks, chartTick{Pos: round1(px(xs[i])), Label: shortNum(xs[i])})
	}
	return c
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// shortNum renders 1234 as "1.2k".
func shortNum(x float64) string {
	switch a := math.Abs(x); {
	case a >= 1e9:
		return strconv.FormatFloat(x/1e9, 'f', 1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(x/1e3, 'f', 0, 64) + "k"
	case a >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
