package nomad

import (
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// metaGPUConstraint is the group meta key in which the adapter records the
// GPU type constraint it wrote ("<target> <operand> <value>"), so that it
// removes exactly that constraint when the job moves, and never one an
// operator wrote.
const metaGPUConstraint = "pollux_gpu_constraint"

// typeConstraint is the constraint that keeps a group on GPUs of one
// type: on ${device.model} inside the device request (source
// device.model), or on the node's ${meta.<key>} or ${attr.<key>} as a
// group constraint.
type typeConstraint struct {
	inDevice bool
	c        *api.Constraint
}

// gpuTypeConstraint returns the constraint for GPU model names models
// under source src, nil when types are off or models is empty: "=" for
// one name, an anchored regexp of the quoted names for several.
func gpuTypeConstraint(src jobs.GPUTypeSource, models []string) *typeConstraint {
	if src.Kind == "" || len(models) == 0 {
		return nil
	}
	target := "${device.model}"
	switch src.Kind {
	case "meta":
		target = "${meta." + src.Key + "}"
	case "attr":
		target = "${attr." + src.Key + "}"
	}
	if len(models) == 1 {
		return &typeConstraint{inDevice: src.Kind == "device", c: api.NewConstraint(target, "=", models[0])}
	}
	quoted := make([]string, len(models))
	for i, m := range models {
		quoted[i] = regexp.QuoteMeta(m)
	}
	slices.Sort(quoted)
	return &typeConstraint{inDevice: src.Kind == "device", c: api.NewConstraint(target, "regexp", "^(?:"+strings.Join(quoted, "|")+")$")}
}

func (tc *typeConstraint) record() string {
	return tc.c.LTarget + " " + tc.c.Operand + " " + tc.c.RTarget
}

// retype removes the GPU type constraint the adapter recorded in the
// group's meta (from the group and its device requests of type dev) and
// adds tc, if not nil, recording it.
func retype(g *api.TaskGroup, dev device, tc *typeConstraint) {
	if old, ok := g.Meta[metaGPUConstraint]; ok {
		drop := func(cs []*api.Constraint) []*api.Constraint {
			return slices.DeleteFunc(cs, func(c *api.Constraint) bool {
				return c != nil && c.LTarget+" "+c.Operand+" "+c.RTarget == old
			})
		}
		g.Constraints = drop(g.Constraints)
		forDevices(g, dev, func(d *api.RequestedDevice) { d.Constraints = drop(d.Constraints) })
		delete(g.Meta, metaGPUConstraint)
	}
	if tc == nil {
		return
	}
	if g.Meta == nil {
		g.Meta = map[string]string{}
	}
	g.Meta[metaGPUConstraint] = tc.record()
	if tc.inDevice {
		forDevices(g, dev, func(d *api.RequestedDevice) {
			c := *tc.c
			d.Constraints = append(d.Constraints, &c)
		})
		return
	}
	c := *tc.c
	g.Constraints = append(g.Constraints, &c)
}

// forDevices calls f for every device request of type dev in the group.
func forDevices(g *api.TaskGroup, dev device, f func(*api.RequestedDevice)) {
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && dev.matchesRequest(d.Name) {
				f(d)
			}
		}
	}
}
