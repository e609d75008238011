package nomad

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

const (
	// nodeIDTarget is the attribute a per-node group is pinned with.
	nodeIDTarget = "${node.unique.id}"
)

// device is a parsed device name: "type", "vendor/type" or
// "vendor/type/name"; empty parts are unspecified.
type device struct {
	vendor, typ, name string
}

// parseDevice parses a device name as Nomad's device block does.
func parseDevice(s string) (device, error) {
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" {
			return device{}, fmt.Errorf("invalid device %q: want type, vendor/type or vendor/type/name", s)
		}
	}
	switch len(parts) {
	case 1:
		return device{typ: parts[0]}, nil
	case 2:
		return device{vendor: parts[0], typ: parts[1]}, nil
	case 3:
		return device{vendor: parts[0], typ: parts[1], name: parts[2]}, nil
	}
	return device{}, fmt.Errorf("invalid device %q: want type, vendor/type or vendor/type/name", s)
}

// String returns the name as given.
func (d device) String() string {
	s := d.typ
	if d.vendor != "" {
		s = d.vendor + "/" + s
	}
	if d.name != "" {
		s += "/" + d.name
	}
	return s
}

// matchesRequest reports whether a job's device request name asks for this
// device: every part both name is equal.
func (d device) matchesRequest(req string) bool {
	r, err := parseDevice(req)
	if err != nil {
		return false
	}
	eq := func(a, b string) bool { return a == "" || b == "" || a == b }
	return r.typ == d.typ && eq(r.vendor, d.vendor) && eq(r.name, d.name)
}

// matchesInstance reports whether a node's (or an allocation's) device group
// vendor/type/name is this device: it has every part the configuration
// gives.
func (d device) matchesInstance(vendor, typ, name string) bool {
	return typ == d.typ && (d.vendor == "" || vendor == d.vendor) && (d.name == "" || name == d.name)
}

// rankGroupName is the name of the group of rank r >= 1 of worker group base.
func rankGroupName(base string, r int) string { return base + "-r" + strconv.Itoa(r) }

// groupRank returns a group's pollux_rank meta, if it has a valid one.
func groupRank(g *api.TaskGroup) (int, bool) {
	v, ok := g.Meta[contract.MetaRank]
	if !ok {
		return 0, false
	}
	r, err := strconv.Atoi(v)
	if err != nil || r < 0 {
		return 0, false
	}
	return r, true
}

// isRankGroup reports whether g is the adapter's group of some rank >= 1 of
// worker group base: named base-rN and marked pollux_rank = N.
func isRankGroup(g *api.TaskGroup, base string) bool {
	r, ok := groupRank(g)
	return ok && r >= 1 && groupName(g) == rankGroupName(base, r)
}

func groupName(g *api.TaskGroup) string {
	if g == nil || g.Name == nil {
		return ""
	}
	return *g.Name
}

func count(g *api.TaskGroup) int {
	if g.Count == nil {
		return 1 // Nomad's default
	}
	return *g.Count
}

// workerGroup finds the job's worker group G, or says why the job cannot be
// managed.
func workerGroup(job *api.Job, dev device) (*api.TaskGroup, string) {
	var g *api.TaskGroup
	if want := job.Meta[contract.MetaGroup]; want != "" {
		g = job.LookupTaskGroup(want)
		if g == nil {
			return nil, fmt.Sprintf("group %q named by %s does not exist", want, contract.MetaGroup)
		}
	} else {
		// Candidates: every group that is not the adapter's copy of another.
		var cands []*api.TaskGroup
		for _, tg := range job.TaskGroups {
			copyOf := false
			for _, base := range job.TaskGroups {
				if base != tg && isRankGroup(tg, groupName(base)) {
					copyOf = true
					break
				}
			}
			if !copyOf {
				cands = append(cands, tg)
			}
		}
		switch {
		case len(cands) == 0:
			return nil, "job has no task group"
		case len(cands) == 1:
			g = cands[0]
		default:
			var marked []*api.TaskGroup
			for _, tg := range cands {
				if r, ok := groupRank(tg); ok && r == 0 {
					marked = append(marked, tg)
				}
			}
			if len(marked) != 1 {
				return nil, fmt.Sprintf("job has %d task groups and no %s meta key naming the worker group", len(cands), contract.MetaGroup)
			}
			g = marked[0]
		}
	}
	if _, ok := deviceCount(g, dev); !ok {
		return nil, fmt.Sprintf("group %q has no device request of type %s", groupName(g), dev)
	}
	return g, ""
}

// deviceCount returns the largest count of the group's device requests of
// type dev (one per task that has one) and whether there is any.
func deviceCount(g *api.TaskGroup, dev device) (int, bool) {
	n, found := 0, false
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if !dev.matchesRequest(d.Name) {
				continue
			}
			found = true
			c := 1 // Nomad's default count
			if d.Count != nil {
				c = int(*d.Count)
			}
			n = max(n, c)
		}
	}
	return n, found
}

// setDeviceCount sets every device request of type dev in the group to n.
func setDeviceCount(g *api.TaskGroup, dev device, n int) {
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if dev.matchesRequest(d.Name) {
				c := uint64(n)
				d.Count = &c
			}
		}
	}
}

// unpin removes the group's ${node.unique.id} = ... constraints.
func unpin(g *api.TaskGroup) {
	g.Constraints = slices.DeleteFunc(g.Constraints, func(c *api.Constraint) bool {
		return c != nil && c.LTarget == nodeIDTarget && (c.Operand == "=" || c.Operand == "==" || c.Operand == "is")
	})
}

// specPlacement reads the placement the spec asks for from the worker group
// and its per-node copies: groups with count >= 1 and pollux_node set, by
// rank. A count above 1 (an operator's edit) multiplies that node's GPUs.
func specPlacement(job *api.Job, g *api.TaskGroup, dev device) []jobs.NodeGPUs {
	type ranked struct {
		rank int
		ng   jobs.NodeGPUs
	}
	var rs []ranked
	for _, tg := range job.TaskGroups {
		if tg != g && !isRankGroup(tg, groupName(g)) {
			continue
		}
		node := tg.Meta[contract.MetaNode]
		r, ok := groupRank(tg)
		if node == "" || !ok || count(tg) < 1 {
			continue
		}
		n, _ := deviceCount(tg, dev)
		rs = append(rs, ranked{r, jobs.NodeGPUs{Node: node, GPUs: n * count(tg)}})
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return a.rank - b.rank })
	var out []jobs.NodeGPUs
	for _, r := range rs {
		out = append(out, r.ng)
	}
	return out
}

// reshape rewrites the job's groups for placement p (see the package
// documentation). g must be the job's worker group from workerGroup.
func reshape(job *api.Job, g *api.TaskGroup, p []jobs.NodeGPUs, dev device, tc *typeConstraint) error {
	base := groupName(g)
	for i, ng := range p {
		if ng.Node == "" || ng.GPUs < 1 {
			return fmt.Errorf("invalid placement entry %d (%q: %d GPUs): want a node ID and at least 1 GPU", i, ng.Node, ng.GPUs)
		}
	}
	if len(p) == 0 {
		tc = nil
	}
	retype(g, dev, tc)
	tmpl, err := copyGroup(g)
	if err != nil {
		return err
	}
	// Drop the old per-node copies; the new ones go right after G.
	var groups []*api.TaskGroup
	at := 0
	for _, tg := range job.TaskGroups {
		if isRankGroup(tg, base) {
			continue
		}
		groups = append(groups, tg)
		if tg == g {
			at = len(groups)
		}
	}
	if g.Meta == nil {
		g.Meta = map[string]string{}
	}
	g.Meta[contract.MetaRank] = "0"
	unpin(g)
	if len(p) == 0 {
		zero := 0
		g.Count = &zero
		delete(g.Meta, contract.MetaNode)
		job.TaskGroups = groups
		return nil
	}
	var copies []*api.TaskGroup
	for r, ng := range p {
		tg := g
		if r > 0 {
			if tg, err = copyGroup(tmpl); err != nil {
				return err
			}
			n := rankGroupName(base, r)
			tg.Name = &n
			tg.Scaling = nil
			unpin(tg)
			copies = append(copies, tg)
		}
		one := 1
		tg.Count = &one
		tg.Constraints = append(tg.Constraints, api.NewConstraint(nodeIDTarget, "=", ng.Node))
		setDeviceCount(tg, dev, ng.GPUs)
		tg.Meta[contract.MetaRank] = strconv.Itoa(r)
		tg.Meta[contract.MetaNode] = ng.Node
	}
	job.TaskGroups = slices.Concat(groups[:at], copies, groups[at:])
	return nil
}

// copyGroup deep-copies a task group.
func copyGroup(g *api.TaskGroup) (*api.TaskGroup, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("failed to copy task group %q: %w", groupName(g), err)
	}
	var c api.TaskGroup
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("failed to copy task group %q: %w", groupName(g), err)
	}
	if c.Meta == nil {
		c.Meta = map[string]string{}
	}
	return &c, nil
}

// copyJob returns a deep copy of a job spec (the cache's copy must not
// change when a write reshapes the one it hands out).
func copyJob(j *api.Job) (*api.Job, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("failed to copy job %q: %w", deref(j.ID), err)
	}
	var c api.Job
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("failed to copy job %q: %w", deref(j.ID), err)
	}
	return &c, nil
}
