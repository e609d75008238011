// Command pollux-local-clients is a Nomad Autoscaler target plugin whose
// instance group is a fixed set of local Nomad clients started and
// stopped by scripts/cluster.sh: the stand-in for a cloud's instance group
// (an AWS Auto Scaling group) in the end-to-end test of Pollux's cluster
// autoscaling, and for trying the chain on one machine.
//
// It does what the autoscaler's cloud targets do, with the autoscaler's
// own SDK: Status reports the running instances; scaling out starts
// stopped ones; scaling in asks scaleutils to pick nodes among the running
// instances with the policy's node_selector_strategy and to drain them,
// then stops those clients and, with node_purge, purges the nodes. An
// instance is a client's name (client-1, ...), which is also its Nomad
// node name.
//
// Plugin configuration (the agent's target block):
//
//	cluster_script  path of scripts/cluster.sh (required)
//	cluster_dir     the cluster's POLLUX_CLUSTER_DIR (default: inherited)
//
// Policy target configuration, besides the SDK's node_pool,
// node_selector_strategy, node_drain_deadline and node_purge:
//
//	instances       the group's clients, comma-separated (required)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"
	"github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/plugins/target"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	"github.com/hashicorp/nomad-autoscaler/sdk/helper/nomad"
	"github.com/hashicorp/nomad-autoscaler/sdk/helper/scaleutils"
	"github.com/hashicorp/nomad/api"
)

const pluginName = "pollux-local-clients"

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} { return &localClients{log: log} })
}

var _ target.Target = (*localClients)(nil)

// localClients is the target: its instance group is a set of local Nomad
// clients of scripts/cluster.sh.
type localClients struct {
	log hclog.Logger

	script string
	env    []string
	utils  *scaleutils.ClusterScaleUtils

	// mu serialises scaling actions; scaling is set during one, when
	// Status reports the group not ready (as a cloud group is not while
	// an activity runs) without waiting for it.
	mu      sync.Mutex
	scaling atomic.Bool
}

// SetConfig takes the plugin's configuration.
func (p *localClients) SetConfig(cfg map[string]string) error {
	p.script = cfg["cluster_script"]
	if p.script == "" {
		return errors.New("cluster_script: required (the path of scripts/cluster.sh)")
	}
	if _, err := os.Stat(p.script); err != nil {
		return fmt.Errorf("cluster_script: %w", err)
	}
	p.env = os.Environ()
	if d := cfg["cluster_dir"]; d != "" {
		p.env = append(p.env, "POLLUX_CLUSTER_DIR="+d)
	}
	utils, err := scaleutils.NewClusterScaleUtils(nomad.ConfigFromNamespacedMap(cfg), p.log)
	if err != nil {
		return err
	}
	// The instance of a Nomad node is its name.
	utils.ClusterNodeIDLookupFunc = func(n *api.Node) (string, error) {
		if n.Name == "" {
			return "", fmt.Errorf("node %s has no name", n.ID)
		}
		return n.Name, nil
	}
	p.utils = utils
	return nil
}

// PluginInfo names the plugin.
func (p *localClients) PluginInfo() (*base.PluginInfo, error) {
	return &base.PluginInfo{Name: pluginName, PluginType: sdk.PluginTypeTarget}, nil
}

// Status reports the running instances of the group; not ready while a
// scaling action runs or a node of the pool is initializing or draining
// (scaleutils.IsPoolReady).
func (p *localClients) Status(cfg map[string]string) (*sdk.TargetStatus, error) {
	if p.scaling.Load() {
		return &sdk.TargetStatus{Ready: false}, nil
	}
	group, err := instances(cfg)
	if err != nil {
		return nil, err
	}
	ready, err := p.utils.IsPoolReady(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to check the node pool: %w", err)
	}
	if !ready {
		return &sdk.TargetStatus{Ready: false}, nil
	}
	running, _, err := p.state(group)
	if err != nil {
		return nil, err
	}
	return &sdk.TargetStatus{Ready: true, Count: int64(len(running)), Meta: map[string]string{"running": strings.Join(running, ",")}}, nil
}

// Scale starts or removes instances to reach action.Count.
func (p *localClients) Scale(action sdk.ScalingAction, cfg map[string]string) error {
	if action.Count == sdk.StrategyActionMetaValueDryRunCount {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scaling.Store(true)
	defer p.scaling.Store(false)
	group, err := instances(cfg)
	if err != nil {
		return err
	}
	running, stopped, err := p.state(group)
	if err != nil {
		return err
	}
	want := int(action.Count)
	log := p.log.With("running", len(running), "count", want, "reason", action.Reason)
	switch {
	case want > len(running):
		n := want - len(running)
		if n > len(stopped) {
			log.Warn("the group has fewer stopped instances than asked for", "asked", n, "stopped", len(stopped))
			n = len(stopped)
		}
		for _, name := range stopped[:n] {
			log.Info("starting instance", "instance", name)
			if err := p.run("start", name); err != nil {
				return err
			}
		}
	case want < len(running):
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		// The SDK picks the nodes (node_selector_strategy) among the
		// running instances and drains them.
		ids, err := p.utils.RunPreScaleInTasksWithRemoteCheck(ctx, cfg, running, len(running)-want)
		if err != nil {
			return fmt.Errorf("failed to perform pre-scale Nomad scale in tasks: %w", err)
		}
		var errs []error
		for _, id := range ids {
			log.Info("stopping drained instance", "instance", id.RemoteResourceID, "node_id", id.NomadNodeID)
			if err := p.run("stop", id.RemoteResourceID); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := p.utils.RunPostScaleInTasks(ctx, cfg, ids); err != nil {
			return fmt.Errorf("failed to perform post-scale Nomad scale in tasks: %w", err)
		}
	default:
		log.Debug("scaling not required")
	}
	return nil
}

// instances reads the group's instance names from the policy's target.
func instances(cfg map[string]string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(cfg["instances"], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("instances: required (the group's clients, comma-separated: client-1,client-2)")
	}
	return out, nil
}

// state splits the group into running and stopped instances, each in the
// group's order, from cluster.sh running.
func (p *localClients) state(group []string) (running, stopped []string, err error) {
	cmd := exec.Command(p.script, "running")
	cmd.Env = p.env
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s running: %w", p.script, err)
	}
	alive := map[string]bool{}
	for _, name := range strings.Fields(string(out)) {
		alive[name] = true
	}
	for _, name := range group {
		if alive[name] {
			running = append(running, name)
		} else {
			stopped = append(stopped, name)
		}
	}
	return slices.Clip(running), slices.Clip(stopped), nil
}

// run runs one cluster.sh action on an instance.
func (p *localClients) run(action, name string) error {
	cmd := exec.Command(p.script, action, name)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s %s: %w: %s", p.script, action, name, err, strings.TrimSpace(string(out)))
	}
	p.log.Info("cluster.sh", "action", action, "instance", name, "output", strings.TrimSpace(string(out)))
	return nil
}
