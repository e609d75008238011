package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/autoscale"
)

// AutoscaleConfig is the autoscaling section of the agent's configuration:
// the utility band and delays of the desired-size computation and, per
// node pool (and GPU type), the node template and bounds. Pollux only
// publishes the desired counts (pollux_cluster_desired_nodes); the Nomad
// Autoscaler resizes the cloud's instance groups (deploy/autoscaler/).
//
// In HCL (the JSON document's form is autoscaleDoc's):
//
//	autoscaling {
//	  rule             = "marginal"
//	  low              = 0.5
//	  high             = 0.8
//	  scale_down_delay = "10m"
//	  pool "gpu" {
//	    gpu_type      = "a100"
//	    gpus_per_node = 8
//	    min_nodes     = 0
//	    max_nodes     = 16
//	  }
//	}
type AutoscaleConfig struct {
	// Enabled is true when the section is present.
	Enabled bool
	// Scaler is the policy's configuration (band, delays, rule, pools).
	Scaler autoscale.Config
}

// autoscaleDoc is the document form of AutoscaleConfig: the HCL block
// of the agent's file and the "autoscaling" object of the JSON document
// (the KV configuration), where the pools are a list of objects with a
// "name":
//
//	"autoscaling": {"low": 0.5, "high": 0.8, "scale_down_delay": "10m",
//	  "pool": [{"name": "gpu", "gpus_per_node": 4, "max_nodes": 16}]}
//
// "enabled": false turns autoscaling off (its series are removed).
type autoscaleDoc struct {
	Enabled         *bool              `json:"enabled" hcl:"enabled,optional"`
	Low             *float64           `json:"low" hcl:"low,optional"`
	High            *float64           `json:"high" hcl:"high,optional"`
	Rule            *string            `json:"rule" hcl:"rule,optional"`
	ScaleDownDelay  *string            `json:"scale_down_delay" hcl:"scale_down_delay,optional"`
	ScaleUpCooldown *string            `json:"scale_up_cooldown" hcl:"scale_up_cooldown,optional"`
	Pools           []autoscalePoolDoc `json:"pool" hcl:"pool,block"`
}

type autoscalePoolDoc struct {
	Name        string  `json:"name" hcl:"name,label"`
	GPUType     *string `json:"gpu_type" hcl:"gpu_type,optional"`
	GPUsPerNode int     `json:"gpus_per_node" hcl:"gpus_per_node"`
	MinNodes    *int    `json:"min_nodes" hcl:"min_nodes,optional"`
	MaxNodes    int     `json:"max_nodes" hcl:"max_nodes"`
}

// ParseAutoscaleHCL reads the autoscaling block of an agent configuration
// in HCL (other blocks and attributes are left to MergeHCL). No block
// gives a disabled config. An unknown field, a wrong type, a bad duration
// or an invalid value (band outside (0, 1), min above max, a pool named
// twice) is an error naming filename, line and field.
func ParseAutoscaleHCL(src []byte, filename string) (AutoscaleConfig, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return AutoscaleConfig{}, fmt.Errorf("failed to parse configuration: %w", diagError(diags, nil))
	}
	content, _, diags := file.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "autoscaling"}}})
	if diags.HasErrors() {
		return AutoscaleConfig{}, fmt.Errorf("invalid configuration: %w", diagError(diags, nil))
	}
	switch len(content.Blocks) {
	case 0:
		return AutoscaleConfig{}, nil
	case 1:
	default:
		return AutoscaleConfig{}, fmt.Errorf("%s: autoscaling: given %d times, want one block", content.Blocks[1].DefRange, len(content.Blocks))
	}
	block := content.Blocks[0]
	body := block.Body.(*hclsyntax.Body)
	var d autoscaleDoc
	if diags := gohcl.DecodeBody(body, nil, &d); diags.HasErrors() {
		return AutoscaleConfig{}, fmt.Errorf("invalid configuration: %w", diagError(diags, prefixed(attributes(body), "autoscaling.")))
	}
	at := func(field string) string {
		if a, ok := body.Attributes[field]; ok {
			return a.Expr.Range().String() + ": "
		}
		return block.DefRange.String() + ": "
	}
	poolAt := func(i int, field string) string {
		pb := body.Blocks[poolBlockIndex(body, i)]
		if a, ok := pb.Body.Attributes[field]; ok {
			return a.Expr.Range().String() + ": "
		}
		return pb.DefRange().String() + ": "
	}
	cfg, err := d.config(at, poolAt)
	if err != nil {
		return AutoscaleConfig{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// config checks the document and returns its configuration. Each error
// names its field (autoscaling.low, autoscaling.pool "gpu".max_nodes),
// preceded by at(field) or poolAt(pool index, field): where the document
// set it ("" where unknown).
func (d *autoscaleDoc) config(at func(field string) string, poolAt func(i int, field string) string) (AutoscaleConfig, error) {
	if d.Enabled != nil && !*d.Enabled {
		return AutoscaleConfig{}, nil
	}
	cfg := AutoscaleConfig{Enabled: true}
	var errs []error
	if d.Low != nil {
		cfg.Scaler.Low = *d.Low
		if !(*d.Low > 0 && *d.Low < 1) {
			errs = append(errs, fmt.Errorf("%sautoscaling.low: %v is outside (0, 1)", at("low"), *d.Low))
		}
	}
	if d.High != nil {
		cfg.Scaler.High = *d.High
		if !(*d.High > 0 && *d.High < 1) {
			errs = append(errs, fmt.Errorf("%sautoscaling.high: %v is outside (0, 1)", at("high"), *d.High))
		}
	}
	if d.Rule != nil {
		cfg.Scaler.Rule = *d.Rule
		if *d.Rule != autoscale.RuleAverage && *d.Rule != autoscale.RuleMarginal {
			errs = append(errs, fmt.Errorf("%sautoscaling.rule: unknown %q (want %s or %s)", at("rule"), truncate(*d.Rule), autoscale.RuleAverage, autoscale.RuleMarginal))
		}
	}
	for _, f := range []struct {
		name string
		v    *string
		dst  *float64
	}{{"scale_down_delay", d.ScaleDownDelay, &cfg.Scaler.ScaleDownDelay}, {"scale_up_cooldown", d.ScaleUpCooldown, &cfg.Scaler.ScaleUpCooldown}} {
		if f.v == nil {
			continue
		}
		dur, err := time.ParseDuration(*f.v)
		if err != nil || dur < 0 {
			errs = append(errs, fmt.Errorf("%sautoscaling.%s: %q is not a non-negative duration such as \"10m\"", at(f.name), f.name, truncate(*f.v)))
			continue
		}
		*f.dst = dur.Seconds()
		if dur == 0 && f.name == "scale_down_delay" {
			*f.dst = -1 // shrink at once
		}
	}
	seen := map[string]bool{}
	for i, p := range d.Pools {
		pat := func(field string) string { return poolAt(i, field) }
		where := fmt.Sprintf("autoscaling.pool %q", truncate(p.Name))
		pool := autoscale.Pool{Name: p.Name, Template: autoscale.Template{GPUsPerNode: p.GPUsPerNode}, MaxNodes: p.MaxNodes}
		if p.GPUType != nil {
			pool.Template.Type = *p.GPUType
		}
		if p.MinNodes != nil {
			pool.MinNodes = *p.MinNodes
		}
		key := p.Name + "\x00" + pool.Template.Type
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("%s%s: empty pool name", pat(""), where))
		case len(p.Name) > maxConfigString:
			errs = append(errs, fmt.Errorf("%s%s: pool name longer than %d bytes", pat(""), where, maxConfigString))
		case seen[key]:
			errs = append(errs, fmt.Errorf("%s%s: pool and GPU type %q given twice", pat(""), where, pool.Template.Type))
		}
		seen[key] = true
		if p.GPUsPerNode < 1 {
			errs = append(errs, fmt.Errorf("%s%s.gpus_per_node: %d is below 1", pat("gpus_per_node"), where, p.GPUsPerNode))
		}
		if pool.MinNodes < 0 {
			errs = append(errs, fmt.Errorf("%s%s.min_nodes: %d is negative", pat("min_nodes"), where, pool.MinNodes))
		}
		if p.MaxNodes < 1 {
			errs = append(errs, fmt.Errorf("%s%s.max_nodes: %d is below 1", pat("max_nodes"), where, p.MaxNodes))
		}
		if pool.MinNodes > p.MaxNodes {
			errs = append(errs, fmt.Errorf("%s%s.min_nodes: %d exceeds max_nodes %d", pat("min_nodes"), where, pool.MinNodes, p.MaxNodes))
		}
		cfg.Scaler.Pools = append(cfg.Scaler.Pools, pool)
	}
	if len(d.Pools) == 0 {
		errs = append(errs, fmt.Errorf("%sautoscaling: at least one pool is needed", at("")))
	}
	if cfg.Scaler.Low != 0 && cfg.Scaler.High != 0 && cfg.Scaler.Low >= cfg.Scaler.High {
		errs = append(errs, fmt.Errorf("%sautoscaling.low: %v must be below high %v", at("low"), cfg.Scaler.Low, cfg.Scaler.High))
	}
	if err := errors.Join(errs...); err != nil {
		return AutoscaleConfig{}, err
	}
	// Pool names are unique per GPU type here; the policy wants one name
	// per pool entry.
	for i := range cfg.Scaler.Pools {
		cfg.Scaler.Pools[i].Name = poolKey(cfg.Scaler.Pools[i].Name, cfg.Scaler.Pools[i].Template.Type)
	}
	if err := cfg.Scaler.Validate(); err != nil {
		return AutoscaleConfig{}, fmt.Errorf("autoscaling: %w", err)
	}
	return cfg, nil
}

// poolBlockIndex is the index in body.Blocks of the i-th pool block.
func poolBlockIndex(body *hclsyntax.Body, i int) int {
	k := 0
	for j, b := range body.Blocks {
		if b.Type == "pool" {
			if k == i {
				return j
			}
			k++
		}
	}
	return 0
}

func prefixed(attrs map[string]*hclsyntax.Attribute, prefix string) map[string]*hclsyntax.Attribute {
	out := make(map[string]*hclsyntax.Attribute, len(attrs))
	for k, v := range attrs {
		out[prefix+k] = v
	}
	return out
}

// poolKey names a pool entry: the node pool, and the GPU type after a
// slash where there is one.
func poolKey(pool, gpuType string) string {
	if gpuType == "" {
		return pool
	}
	return pool + "/" + gpuType
}

// CheckPools reports the configured pools that are not among the
// cluster's node pools (known, from Nomad).
func (c AutoscaleConfig) CheckPools(known []string) error {
	var errs []error
	for _, p := range c.Scaler.Pools {
		name := p.Name
		if p.Template.Type != "" {
			name = name[:len(name)-len(p.Template.Type)-1]
		}
		if !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("autoscaling.pool %q: unknown node pool (the cluster has %v)", name, known))
		}
	}
	return errors.Join(errs...)
}

// AutoscaleStatus is one pool's line of the autoscaling status: the
// desired count and why.
type AutoscaleStatus = contract.AutoscalePool

// ClusterAutoscaler computes each pool's desired node count once per round
// and publishes it as the gauge pollux_cluster_desired_nodes{node_pool,
// gpu_type}, with the utilities behind it. Only the leader publishes.
type ClusterAutoscaler struct {
	cfg     AutoscaleConfig
	scaler  *autoscale.Scaler
	desired *prometheus.GaugeVec
	utility *prometheus.GaugeVec

	mu       sync.Mutex
	last     []AutoscaleStatus
	emptying map[string]bool
}

// NewClusterAutoscaler returns the autoscaler of cfg, its gauges
// registered in reg.
func NewClusterAutoscaler(cfg AutoscaleConfig, reg prometheus.Registerer) (*ClusterAutoscaler, error) {
	sc, err := autoscale.NewScaler(cfg.Scaler)
	if err != nil {
		return nil, err
	}
	a := &ClusterAutoscaler{
		cfg: cfg, scaler: sc,
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollux_cluster_desired_nodes",
			Help: "Nodes each node pool (and GPU type) should run, from the jobs' goodput; the Nomad Autoscaler's pass-through target.",
		}, []string{"node_pool", "gpu_type"}),
		utility: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollux_cluster_utility",
			Help: "Cluster utility (jobs' share-weighted fraction of ideal speedup) of each pool at its current size (at=now) and its desired size (at=desired).",
		}, []string{"node_pool", "gpu_type", "at"}),
	}
	if reg != nil {
		if err := reg.Register(a.desired); err != nil {
			return nil, err
		}
		if err := reg.Register(a.utility); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// PoolNode is a node of the cluster as the autoscaler counts it.
type PoolNode struct {
	// NodePool is the node's Nomad node pool; Type its GPU type.
	NodePool, Type string
	// ID identifies the node (policy.Node.ID).
	ID string
	// Name is the node's name, for the status ("" gives the ID).
	Name string
	// Others is the GPUs jobs Pollux does not manage hold on it.
	Others int
}

// Round decides every pool's desired count from the round's jobs (as the
// policy saw them), the nodes of each pool (ready or not) and the
// allocation in force, and publishes it.
func (a *ClusterAutoscaler) Round(now time.Time, jobs []policy.Job, nodes []PoolNode, alloc policy.Allocations) []AutoscaleStatus {
	in := autoscale.Input{Now: float64(now.UnixNano()) / 1e9, Jobs: jobs, Nodes: map[string]int{}, JobPool: map[string]string{}}
	poolOf := map[string]string{}
	members := map[string][]string{}
	used := map[string]int{}
	names := map[string]string{}
	for _, n := range nodes {
		names[n.ID] = cmp.Or(n.Name, n.ID)
		k := poolKey(n.NodePool, n.Type)
		in.Nodes[k]++
		poolOf[n.ID] = k
		members[k] = append(members[k], n.ID)
		used[n.ID] = n.Others
	}
	for id, al := range alloc {
		if len(al) > 0 {
			in.JobPool[id] = poolOf[al[0]]
		}
		for _, n := range al {
			used[n]++
		}
	}
	var out []AutoscaleStatus
	emptying := map[string]bool{}
	for i, d := range a.scaler.Decide(in) {
		p := a.cfg.Scaler.Pools[i]
		pool := p.Name
		if p.Template.Type != "" {
			pool = pool[:len(pool)-len(p.Template.Type)-1]
		}
		a.desired.WithLabelValues(pool, p.Template.Type).Set(float64(d.Desired))
		a.utility.WithLabelValues(pool, p.Template.Type, "now").Set(d.UtilityNow)
		a.utility.WithLabelValues(pool, p.Template.Type, "desired").Set(d.UtilityDesired)
		var surplus []string
		for _, id := range autoscale.Surplus(members[p.Name], used, d.Desired) {
			emptying[id] = true
			surplus = append(surplus, names[id])
		}
		out = append(out, AutoscaleStatus{NodePool: pool, GPUType: p.Template.Type, Nodes: in.Nodes[p.Name], Desired: d.Desired,
			UtilityNow: d.UtilityNow, UtilityDesired: d.UtilityDesired, Reason: d.Reason, Emptying: surplus})
	}
	a.mu.Lock()
	a.last, a.emptying = out, emptying
	a.mu.Unlock()
	return out
}

// Emptying reports whether the last round chose node id to be emptied
// (its pool is above its desired count): the next round places nothing
// on it, so that the autoscaler removes it empty.
func (a *ClusterAutoscaler) Emptying(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emptying[id]
}

// reconfigure replaces the configuration; the hysteresis starts afresh
// and the series of pools no longer configured are removed.
func (a *ClusterAutoscaler) reconfigure(cfg AutoscaleConfig) error {
	sc, err := autoscale.NewScaler(cfg.Scaler)
	if err != nil {
		return err
	}
	a.cfg, a.scaler = cfg, sc
	a.clear()
	return nil
}

// clear removes every published series and the last status.
func (a *ClusterAutoscaler) clear() {
	a.desired.Reset()
	a.utility.Reset()
	a.mu.Lock()
	a.last, a.emptying = nil, nil
	a.mu.Unlock()
}

// autoscale decides each node pool's desired node count from the round's
// jobs (as the policy saw them) and the allocation the policy chose,
// publishes it (pollux_cluster_desired_nodes) and puts it in the status.
// A node whose pool the cluster does not report counts in the
// configuration's node_pool, else in "default".
func (c *Controller) autoscale(r *round) {
	cfg := r.cfg.Autoscale
	if !cfg.Enabled {
		if c.autoscaler != nil {
			c.autoscaler.clear()
		}
		return
	}
	switch {
	case c.autoscaler == nil:
		a, err := NewClusterAutoscaler(cfg, c.metrics.reg)
		if err != nil {
			r.addError(fmt.Sprintf("autoscaling: %v", err))
			return
		}
		c.autoscaler = a
	case !reflect.DeepEqual(c.autoscaler.cfg, cfg):
		if err := c.autoscaler.reconfigure(cfg); err != nil {
			r.addError(fmt.Sprintf("autoscaling: %v", err))
			return
		}
	}
	pool := cmp.Or(r.cfg.NodePool, "default")
	nodes := make([]PoolNode, 0, len(r.nodes))
	for _, n := range r.nodes {
		nodes = append(nodes, PoolNode{NodePool: cmp.Or(n.NodePool, pool), Type: r.nodeType[n.ID], ID: n.ID, Name: n.Name, Others: n.UsedByOthers})
	}
	r.status.Autoscaling = c.autoscaler.Round(r.start, r.in.Jobs, nodes, r.next)
}

// Status returns the last round's decisions (nil before the first).
func (a *ClusterAutoscaler) Status() []AutoscaleStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.last)
}
