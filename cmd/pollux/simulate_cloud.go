package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/sim"
)

// cloudFlags are pollux simulate's flags of the cloud mode.
type cloudFlags struct {
	autoscale, band, price string
	boot, downDelay        time.Duration
	strategy, rule         string
}

func addCloudFlags(fs *flag.FlagSet) *cloudFlags {
	c := &cloudFlags{}
	fs.StringVar(&c.autoscale, "autoscale", "", "MIN:MAX: a cloud cluster of MIN to MAX nodes per GPU type, of the -gpus-per-node or -cluster template, sized by an autoscaler (goodput utility for pollux, queue-driven for the rigid policies); the JSON summary's gpu_hours counts the nodes up")
	fs.DurationVar(&c.boot, "node-boot", sim.DefaultNodeBoot, "with -autoscale: time from asking for a node to its joining")
	fs.StringVar(&c.band, "autoscale-band", "", "with -autoscale: LOW:HIGH utility band of the goodput autoscaler (default: the rule's, 0.5:0.8 marginal, 0.35:0.65 average)")
	fs.DurationVar(&c.downDelay, "scale-down-delay", 10*time.Minute, "with -autoscale: how long a smaller size (goodput) or an idle node (queue) must last before nodes are removed")
	fs.StringVar(&c.strategy, "autoscale-strategy", "", "with -autoscale: utility or queue (default: utility for policies using goodput, queue otherwise)")
	fs.StringVar(&c.rule, "autoscale-rule", "", "with -autoscale: what the band bounds, marginal (default: the speedup per GPU the last node adds) or average (AdaptDL's: the jobs' average fraction of ideal speedup)")
	fs.StringVar(&c.price, "gpu-price", "", "with -autoscale: price per GPU-hour, PRICE or TYPE=PRICE[,...]; the summary's cost")
	return c
}

// config returns the simulator's cloud config, nil without -autoscale.
func (c *cloudFlags) config() (*sim.Cloud, error) {
	if c.autoscale == "" {
		if c.price != "" {
			return nil, fmt.Errorf("-gpu-price needs -autoscale")
		}
		return nil, nil
	}
	lo, hi, ok := strings.Cut(c.autoscale, ":")
	minN, err1 := strconv.Atoi(lo)
	maxN, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || minN < 0 || maxN < 1 || minN > maxN {
		return nil, fmt.Errorf("-autoscale %q: want MIN:MAX with 0 <= MIN <= MAX and MAX >= 1", c.autoscale)
	}
	var low, high float64
	if c.band != "" {
		bl, bh, ok := strings.Cut(c.band, ":")
		var err1, err2 error
		low, err1 = strconv.ParseFloat(bl, 64)
		high, err2 = strconv.ParseFloat(bh, 64)
		if !ok || err1 != nil || err2 != nil || !(low > 0 && low < high && high < 1) {
			return nil, fmt.Errorf("-autoscale-band %q: want LOW:HIGH with 0 < LOW < HIGH < 1", c.band)
		}
	}
	if c.boot <= 0 || c.downDelay < 0 {
		return nil, fmt.Errorf("-node-boot must be positive and -scale-down-delay not negative")
	}
	cl := &sim.Cloud{MinNodes: minN, MaxNodes: maxN, Boot: c.boot, Strategy: c.strategy, IdleDelay: c.downDelay}
	cl.Scaler.Low, cl.Scaler.High, cl.Scaler.Rule = low, high, c.rule
	cl.Scaler.ScaleDownDelay = c.downDelay.Seconds()
	if c.downDelay == 0 {
		cl.Scaler.ScaleDownDelay = -1
		cl.IdleDelay = time.Nanosecond
	}
	if c.price != "" {
		cl.Price = map[string]float64{}
		for _, part := range strings.Split(c.price, ",") {
			t, v, typed := strings.Cut(part, "=")
			if !typed {
				t, v = "", part
			}
			p, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || p < 0 {
				return nil, fmt.Errorf("-gpu-price part %q: want PRICE or TYPE=PRICE with a non-negative price", part)
			}
			cl.Price[strings.TrimSpace(t)] = p
		}
	}
	return cl, nil
}
