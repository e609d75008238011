package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/autoscale"
)

// DefaultNodeBoot is Cloud.Boot's default: the time from asking a cloud for
// a GPU instance to the node being ready for jobs.
const DefaultNodeBoot = 3 * time.Minute

// Strategies of Cloud.Strategy.
const (
	// StrategyUtility sizes each pool from the jobs' goodput
	// (autoscale.Scaler).
	StrategyUtility = "utility"
	// StrategyQueue adds nodes for pending GPU requests and removes idle
	// ones (autoscale.Queue).
	StrategyQueue = "queue"
)

// Cloud turns the simulated cluster into a cloud one: each GPU type of
// Config.Cluster (or the one untyped group) becomes a node pool whose
// nodes an autoscaler adds and removes. Config's node counts are then
// only templates: a pool starts at Initial nodes.
type Cloud struct {
	// MinNodes and MaxNodes bound every pool's size.
	MinNodes, MaxNodes int
	// Initial is every pool's size at time 0 (default MinNodes), ready at
	// once.
	Initial int
	// Boot is how long a new node takes to become ready (default
	// DefaultNodeBoot). It is billed from the moment it is asked for.
	Boot time.Duration
	// Strategy is StrategyUtility or StrategyQueue; "" takes the first
	// for a policy that uses goodput models and the second otherwise
	// (rigid jobs at their requested GPU counts). The queue strategy
	// sizes the first GPU type's pool only: the rigid policies do not
	// choose GPU types.
	Strategy string
	// Scaler configures the utility strategy: band, scale-down delay and
	// scale-up cooldown (its Pools are filled in from the cluster).
	Scaler autoscale.Config
	// IdleDelay is how long a node must be idle before the queue strategy
	// removes it (default autoscale.DefaultScaleDownDelay seconds).
	IdleDelay time.Duration
	// Price is the price of one GPU-hour per GPU type ("" on an untyped
	// cluster); a type absent costs 0.
	Price map[string]float64
}

// maxGPUs is the GPUs of every pool at its maximum.
func (c *Cloud) maxGPUs(groups []NodeGroup) int {
	n := 0
	for _, g := range groups {
		n += c.MaxNodes * g.GPUsPerNode
	}
	return n
}

func (c *Cloud) validate() error {
	var errs []error
	if c.MinNodes < 0 || c.MaxNodes < 1 || c.MinNodes > c.MaxNodes {
		errs = append(errs, fmt.Errorf("cloud: want 0 <= min nodes <= max nodes and max nodes >= 1, got %d:%d", c.MinNodes, c.MaxNodes))
	}
	if c.Initial < 0 || c.Initial > c.MaxNodes {
		errs = append(errs, fmt.Errorf("cloud: initial nodes %d outside [0, %d]", c.Initial, c.MaxNodes))
	}
	if c.Boot < 0 || c.IdleDelay < 0 {
		errs = append(errs, errors.New("cloud: boot time and idle delay must not be negative"))
	}
	switch c.Strategy {
	case "", StrategyUtility, StrategyQueue:
	default:
		errs = append(errs, fmt.Errorf("cloud: unknown strategy %q (want %s or %s)", c.Strategy, StrategyUtility, StrategyQueue))
	}
	for t, p := range c.Price {
		if !(p >= 0) || math.IsInf(p, 0) {
			errs = append(errs, fmt.Errorf("cloud: price of GPU type %q: %v is not a finite non-negative number", t, p))
		}
	}
	return errors.Join(errs...)
}

// cloudNode is one node asked for and not yet removed.
type cloudNode struct {
	id, typ  string
	gpus     int
	ready    float64 // time it is (or was) ready
	draining bool    // removed at the next round, its jobs stopped
}

// cloudState is a simulation's cloud.
type cloudState struct {
	cfg    Cloud
	pools  []autoscale.Pool
	boot   float64
	nodes  []*cloudNode
	seq    int
	scaler *autoscale.Scaler
	queue  *autoscale.Queue
	// bill holds the GPUs up per type from each time on.
	bill []billSegment
}

// billSegment: from start on (until the next segment), gpus GPUs per type
// were up (booting, ready or draining).
type billSegment struct {
	start float64
	gpus  map[string]int
}

// poolName is the pool of GPU type t.
func poolName(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// initCloud replaces the fixed nodes by each pool's initial nodes.
func (s *Simulator) initCloud() error {
	c := *s.cfg.Cloud
	if err := c.validate(); err != nil {
		return err
	}
	if c.Initial == 0 {
		c.Initial = c.MinNodes
	}
	if c.Boot == 0 {
		c.Boot = DefaultNodeBoot
	}
	if c.Strategy == "" {
		c.Strategy = StrategyUtility
		if !s.traits.UsesGoodput {
			c.Strategy = StrategyQueue
		}
	}
	cs := &cloudState{cfg: c, boot: c.Boot.Seconds()}
	for _, t := range s.types {
		cs.pools = append(cs.pools, autoscale.Pool{Name: poolName(t), Template: autoscale.Template{GPUsPerNode: s.gpusPerNode[t], Type: t}, MinNodes: c.MinNodes, MaxNodes: c.MaxNodes})
	}
	var err error
	switch c.Strategy {
	case StrategyUtility:
		sc := c.Scaler
		sc.Pools = cs.pools
		cs.scaler, err = autoscale.NewScaler(sc)
	case StrategyQueue:
		cs.queue, err = autoscale.NewQueue(autoscale.QueueConfig{Pool: cs.pools[0], IdleDelay: c.IdleDelay.Seconds()})
	}
	if err != nil {
		return err
	}
	s.cloud = cs
	for _, p := range cs.pools {
		for range c.Initial {
			cs.launch(p, 0, 0)
		}
	}
	s.cloudNodes()
	cs.record(0)
	return nil
}

// launch asks for one node of pool p at time now, ready after boot.
func (cs *cloudState) launch(p autoscale.Pool, now, boot float64) {
	id := "n" + strconv.Itoa(cs.seq)
	if p.Template.Type != "" {
		id = p.Template.Type + "-" + id
	}
	cs.seq++
	cs.nodes = append(cs.nodes, &cloudNode{id: id, typ: p.Template.Type, gpus: p.Template.GPUsPerNode, ready: now + boot})
}

// record starts a billing segment at now if the GPUs up changed.
func (cs *cloudState) record(now float64) {
	g := map[string]int{}
	for _, n := range cs.nodes {
		g[n.typ] += n.gpus
	}
	if k := len(cs.bill); k > 0 && mapsEqual(cs.bill[k-1].gpus, g) {
		return
	}
	cs.bill = append(cs.bill, billSegment{start: now, gpus: g})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// cloudNodes sets the nodes the policy may use: the ready ones not
// draining, in launch order.
func (s *Simulator) cloudNodes() {
	s.nodes = nil // a fresh slice: the policy may keep the last round's
	s.nodeIdx = map[string]int{}
	for _, n := range s.cloud.nodes {
		if n.ready <= s.now && !n.draining {
			s.nodeIdx[n.id] = len(s.nodes)
			s.nodes = append(s.nodes, policy.Node{ID: n.id, GPUs: n.gpus, Type: n.typ})
		}
	}
}

// cloudBefore runs at the start of a round, before the policy: drained
// nodes leave (the jobs still on them are stopped, to restart wherever
// the policy places them) and booted nodes join.
func (s *Simulator) cloudBefore() {
	cs := s.cloud
	kept := cs.nodes[:0]
	for _, n := range cs.nodes {
		if !n.draining {
			kept = append(kept, n)
			continue
		}
		for _, j := range s.jobs {
			for _, id := range s.alloc[j.name] {
				if id == n.id {
					delete(s.alloc, j.name)
					j.reallocate("", nil, 0)
					break
				}
			}
		}
	}
	cs.nodes = kept
	s.cloudNodes()
	cs.record(s.now)
}

// cloudAfter runs after the policy's round: the autoscaler decides and
// nodes are asked for, cancelled or drained.
func (s *Simulator) cloudAfter() {
	cs := s.cloud
	used := s.alloc.UsedGPUs()
	if cs.queue != nil {
		s.queueRound(used)
	} else {
		s.utilityRound(used)
	}
	cs.record(s.now)
}

func (s *Simulator) utilityRound(used map[string]int) {
	cs := s.cloud
	in := autoscale.Input{Now: s.now, Jobs: s.roundJobs, Nodes: map[string]int{}, JobPool: map[string]string{}}
	for _, n := range cs.nodes {
		if !n.draining {
			in.Nodes[poolName(n.typ)]++
		}
	}
	for id, a := range s.alloc {
		if len(a) > 0 {
			in.JobPool[id] = poolName(s.nodes[s.nodeIdx[a[0]]].Type)
		}
	}
	for i, d := range cs.scaler.Decide(in) {
		p := cs.pools[i]
		have := in.Nodes[p.Name]
		for range d.Desired - have {
			cs.launch(p, s.now, cs.boot)
		}
		if d.Desired < have {
			cs.shrink(p.Template.Type, have-d.Desired, used, s.now)
		}
	}
}

// shrink removes k nodes of type t: booting ones first (newest first),
// then ready ones holding the fewest GPUs of jobs (newest first on a tie),
// which drain.
func (cs *cloudState) shrink(t string, k int, used map[string]int, now float64) {
	var cand []*cloudNode
	for _, n := range cs.nodes {
		if n.typ == t && !n.draining {
			cand = append(cand, n)
		}
	}
	order := make(map[*cloudNode]int, len(cand))
	for i, n := range cand {
		order[n] = i
	}
	sort.SliceStable(cand, func(a, b int) bool {
		ba, bb := cand[a].ready > now, cand[b].ready > now
		if ba != bb {
			return ba
		}
		if ua, ub := used[cand[a].id], used[cand[b].id]; ua != ub {
			return ua < ub
		}
		return order[cand[a]] > order[cand[b]]
	})
	cancelled := map[*cloudNode]bool{}
	for _, n := range cand[:min(k, len(cand))] {
		if n.ready > now {
			cancelled[n] = true
		} else {
			n.draining = true
		}
	}
	kept := cs.nodes[:0]
	for _, n := range cs.nodes {
		if !cancelled[n] {
			kept = append(kept, n)
		}
	}
	cs.nodes = kept
}

func (s *Simulator) queueRound(used map[string]int) {
	cs := s.cloud
	p := cs.pools[0]
	in := autoscale.QueueInput{Now: s.now}
	for _, j := range s.roundJobs {
		if len(s.alloc[j.ID]) == 0 {
			in.Pending = append(in.Pending, max(j.MaxReplicas, j.MinReplicas, 1))
		}
	}
	for _, n := range cs.nodes {
		switch {
		case n.draining:
		case n.ready > s.now:
			in.Booting++
		default:
			in.Nodes = append(in.Nodes, autoscale.NodeUse{ID: n.id, Used: used[n.id]})
		}
	}
	d := cs.queue.Decide(in)
	for range d.Launch {
		cs.launch(p, s.now, cs.boot)
	}
	remove := map[string]bool{}
	for _, id := range d.Remove {
		remove[id] = true
	}
	for _, n := range cs.nodes {
		if remove[n.id] {
			n.draining = true
		}
	}
}

// gpusUp is the GPUs up now: on a fixed cluster all of them.
func (s *Simulator) gpusUp() int {
	if s.cloud == nil {
		return s.cfg.totalGPUs()
	}
	n := 0
	for _, g := range s.cloud.bill[len(s.cloud.bill)-1].gpus {
		n += g
	}
	return n
}

// billing returns the GPU-hours of the nodes up from the first submission
// to the last completion, and their price (Cloud.Price); on a fixed
// cluster its GPUs times that time.
func (s *Simulator) billing() (gpuHours, cost float64) {
	first, last := math.Inf(1), math.Inf(-1)
	for _, j := range s.jobs {
		first = math.Min(first, j.submitted)
		if j.done() {
			last = math.Max(last, j.completion)
		}
	}
	if !(last > first) {
		return 0, 0
	}
	bill := []billSegment{{start: 0, gpus: s.typeGPUs}}
	var price map[string]float64
	if s.cloud != nil {
		bill, price = s.cloud.bill, s.cloud.cfg.Price
	}
	for i, seg := range bill {
		end := math.Inf(1)
		if i+1 < len(bill) {
			end = bill[i+1].start
		}
		h := (math.Min(end, last) - math.Max(seg.start, first)) / 3600
		if h <= 0 {
			continue
		}
		for t, g := range seg.gpus {
			gpuHours += float64(g) * h
			cost += float64(g) * h * price[t]
		}
	}
	return gpuHours, cost
}
