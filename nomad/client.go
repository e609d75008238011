package nomad

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// ErrNotManaged is returned by Apply for a job whose meta does not have
// pollux_enabled = "true": the adapter never changes such a job.
var ErrNotManaged = errors.New("job is not tagged pollux_enabled = \"true\"")

// taggedFilter is the server-side filter for Pollux jobs.
const taggedFilter = `Meta.` + contract.MetaEnabled + ` == "true"`

// Config configures a Client. The zero value is not valid: Device is
// required.
type Config struct {
	// Device is the Nomad device type of a GPU: "type", "vendor/type" or
	// "vendor/type/name" as in a job's device block ("nvidia/gpu" in
	// production, "nomad/file/mock" on the test cluster). Required.
	Device string
	// Logger receives the adapter's logs (sub-logger "nomad"). Default: no
	// logging.
	Logger hclog.Logger
	// GPUTypeSource says where a node's GPU model name comes from
	// (jobs.Node.GPUModel; see jobs.ParseGPUTypeSource). The zero value:
	// nowhere. The controller sets it again before each round
	// (SetGPUTypeSource).
	GPUTypeSource jobs.GPUTypeSource
	// Namespaces limits the jobs the adapter manages to these namespaces.
	// Empty: every namespace the token may read ("*"). Jobs in other
	// namespaces are treated like jobs Pollux does not manage.
	Namespaces []string
	// NodePool limits Nodes to the nodes of one node pool. Empty: all.
	NodePool string
	// RequestTimeout bounds each call of the jobs.Cluster methods (all the
	// HTTP requests one ReadJob, Nodes, Apply or Placed makes), so that a
	// Nomad server that accepts connections but answers nothing fails the
	// call instead of hanging the round. A blocking ListJobs is bounded by
	// its wait plus RequestTimeout. Default 15s.
	RequestTimeout time.Duration
	// Lease, if set, is asked right before each registration Apply makes
	// (after every read the write needs, as late as the client can): the
	// job is registered only if it returns no error, with job meta
	// pollux_term set to the term it names, and with the request's context
	// ending at the lease's end. It is how a leader that was paused or cut
	// off refrains from changing jobs once another may lead (see
	// consul.Leader.Lease). Nil: no check (single-instance tools).
	Lease func() (term string, end time.Time, err error)
}

// ErrNoLease: Apply did not register a job because Config.Lease refused.
var ErrNoLease = errors.New("no leader lease")

// DefaultRequestTimeout is Config.RequestTimeout's default.
const DefaultRequestTimeout = 15 * time.Second

// bounded returns ctx limited to the request timeout plus extra.
func (c *Client) bounded(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout+extra)
}

// Client is the controller's view of Nomad: it implements jobs.Cluster.
// It is safe for concurrent use.
type Client struct {
	api *api.Client
	dev device
	ns  map[string]bool // nil: every namespace
	cfg Config
	log hclog.Logger
	// cache lets steady-state rounds re-read only what changed (cache.go).
	cache readCache
	// parked and queued count the jobs ReadParked and ReadQueued
	// described from the list alone.
	parked, queued atomic.Int64

	// typeMu guards src and models: the GPU type source and each node's
	// model name read from its meta or attributes, by node ID, kept while
	// the node's ModifyIndex stays the same.
	typeMu sync.Mutex
	src    jobs.GPUTypeSource
	models map[string]nodeModel
}

// nodeModel is a node's GPU model name as read at a ModifyIndex under a
// source.
type nodeModel struct {
	index uint64
	src   jobs.GPUTypeSource
	model string
}

var _ jobs.GPUTypeSourcer = (*Client)(nil)

// SetGPUTypeSource sets where Nodes reads each node's GPU model name, and
// which constraint Apply writes.
func (c *Client) SetGPUTypeSource(src jobs.GPUTypeSource) {
	c.typeMu.Lock()
	defer c.typeMu.Unlock()
	c.src = src
}

func (c *Client) typeSource() jobs.GPUTypeSource {
	c.typeMu.Lock()
	defer c.typeMu.Unlock()
	return c.src
}

// nodeModelOf returns a node's GPU model name from its meta or attributes
// (source kinds meta and attr), reading the node only when its
// ModifyIndex moved since the last read.
func (c *Client) nodeModelOf(ctx context.Context, s *api.NodeListStub, src jobs.GPUTypeSource) (string, error) {
	c.typeMu.Lock()
	m, ok := c.models[s.ID]
	c.typeMu.Unlock()
	if ok && m.index == s.ModifyIndex && m.src == src {
		return m.model, nil
	}
	n, _, err := c.api.Nodes().Info(s.ID, c.query(ctx, ""))
	if err != nil {
		return "", fmt.Errorf("failed to read node %s for its GPU type: %w", s.Name, Classify(err, "reading node "+s.Name, NeedNode))
	}
	model := n.Meta[src.Key]
	if src.Kind == "attr" {
		model = n.Attributes[src.Key]
	}
	if model == "" {
		c.log.Warn("node has no GPU type: its "+src.Kind+" key is not set", "node", s.Name, "key", src.Key)
	}
	c.typeMu.Lock()
	if c.models == nil {
		c.models = map[string]nodeModel{}
	}
	c.models[s.ID] = nodeModel{index: s.ModifyIndex, src: src, model: model}
	c.typeMu.Unlock()
	return model, nil
}

var _ jobs.Cluster = (*Client)(nil)

// New returns a Client using client, which api.NewClient(api.DefaultConfig())
// configures from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the NOMAD_CA*
// TLS variables.
func New(client *api.Client, cfg Config) (*Client, error) {
	if client == nil {
		return nil, errors.New("failed to create nomad client: no api client")
	}
	dev, err := parseDevice(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("failed to create nomad client: %w", err)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	c := &Client{api: client, dev: dev, cfg: cfg, log: cfg.Logger, src: cfg.GPUTypeSource}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	c.log = c.log.Named("nomad")
	if len(cfg.Namespaces) > 0 {
		c.ns = map[string]bool{}
		for _, n := range cfg.Namespaces {
			if n == "" || n == "*" {
				c.ns = nil
				break
			}
			c.ns[n] = true
		}
	}
	return c, nil
}

// managed reports whether jobs of namespace ns are the controller's.
func (c *Client) managed(ns string) bool { return c.ns == nil || c.ns[ns] }

func namespace(ref jobs.JobRef) string {
	if ref.Namespace == "" {
		return "default"
	}
	return ref.Namespace
}

func (c *Client) query(ctx context.Context, ns string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
}

// isNotFound reports whether err is Nomad's 404.
func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.HasStatusCode() && ue.StatusCode() == http.StatusNotFound
}

// isConflict reports whether err is the server's answer to a register whose
// enforced JobModifyIndex is stale.
func isConflict(err error) bool {
	return err != nil && strings.Contains(err.Error(), "conflicting job modify index")
}

// ListJobs returns the Pollux-tagged jobs of every namespace the client
// manages, sorted by namespace and ID. With waitIndex > 0 it is a Nomad
// blocking query: it returns when the jobs list changes past waitIndex (any
// job's change wakes it, so callers diff the result) or after wait.
func (c *Client) ListJobs(ctx context.Context, waitIndex uint64, wait time.Duration) ([]jobs.JobRef, uint64, error) {
	var extra time.Duration
	if waitIndex > 0 {
		extra = cmp.Or(wait, 5*time.Minute)
		extra += extra / 16 // Nomad's jitter
	}
	ctx, cancel := c.bounded(ctx, extra)
	defer cancel()
	q := c.query(ctx, "*")
	q.Filter = taggedFilter
	// The meta too: ReadParked describes a job scaled to zero from it.
	q.Params = map[string]string{"meta": "true"}
	q.WaitIndex = waitIndex
	q.WaitTime = wait
	stubs, qm, err := c.api.Jobs().List(q)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to list jobs: %w", Classify(err, `listing jobs in namespace "*"`, NeedNamespace("list-jobs", "*")))
	}
	c.cache.recordList(stubs, c.managed)
	refs := make([]jobs.JobRef, 0, len(stubs))
	for _, s := range stubs {
		ns := cmp.Or(s.Namespace, "default")
		if !c.managed(ns) {
			continue
		}
		refs = append(refs, jobs.JobRef{Namespace: ns, ID: s.ID})
	}
	slices.SortFunc(refs, func(a, b jobs.JobRef) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
	})
	return refs, qm.LastIndex, nil
}

// info reads a job's spec.
func (c *Client) info(ctx context.Context, ref jobs.JobRef) (*api.Job, error) {
	job, _, err := c.api.Jobs().Info(ref.ID, c.query(ctx, namespace(ref)))
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("failed to read job %s: %w", ref, errors.Join(contract.ErrNotFound, err))
		}
		return nil, fmt.Errorf("failed to read job %s: %w", ref, Classify(err, "reading job "+ref.String(), NeedNamespace("read-job", namespace(ref))))
	}
	if job.JobModifyIndex == nil {
		return nil, fmt.Errorf("failed to read job %s: server returned no JobModifyIndex", ref)
	}
	return job, nil
}

// ReadJob reads one job: its meta, index and status, the placement its spec
// asks for and what runs (see the package documentation). A job that cannot
// be managed is returned with Problem set, not as an error; a job that does
// not exist gives an error wrapping contract.ErrNotFound. It always reads
// from Nomad; ReadListed may reuse what it read before.
func (c *Client) ReadJob(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	return c.read(ctx, ref, false)
}

// ReadListed reads a job as ReadJob does, but reuses its spec when the
// last ListJobs showed it unchanged, and takes its allocations from one
// listing shared by the reads of a round (cache.go): what a controller's
// round does right after listing the jobs.
func (c *Client) ReadListed(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	return c.read(ctx, ref, true)
}

// ReadParked reads a job as ReadListed does, except that when the last
// ListJobs shows it at parkedAt (the JobModifyIndex of the controller's
// own write that scaled it to zero: its spec asks for no GPUs) and no
// placed allocation of it is listed, the job is described from the list
// alone: its meta, index and status, no placement, and the submission
// time the controller's write recorded in meta. No spec is read until a
// write needs it (Apply reads it then, and the write is a check-and-set
// at that index). A spec cached at the index is used as ReadListed
// would (it may tell a problem the list cannot).
func (c *Client) ReadParked(ctx context.Context, ref jobs.JobRef, parkedAt uint64) (jobs.Job, error) {
	ref.Namespace = namespace(ref)
	l, ok, cached := c.cache.listing(ref)
	submit, terr := time.Parse(time.RFC3339Nano, l.meta[contract.MetaSubmitTime])
	if !ok || cached || parkedAt == 0 || l.jobModifyIndex != parkedAt || l.meta[contract.MetaEnabled] != "true" || terr != nil {
		return c.read(ctx, ref, true)
	}
	return c.fromList(ctx, ref, l, submit, false, &c.parked)
}

// ReadQueued reads a job as ReadListed does, except that a job its
// author submitted and nobody changed since (the last ListJobs shows its
// JobModifyIndex equal to its CreateIndex: every write, the controller's
// too, moves it), whose summary shows allocations Nomad queued and none
// starting or running, and of which no placed allocation is listed, is
// described from the list alone: its meta, index, status and submission
// time, no placement, Unshaped (its count is at least 1: Nomad queued
// it) and Listed. Its spec is read when a write needs it (Apply), and a
// problem in the spec shows then. A controller adopting thousands of
// jobs Nomad queued reads only the specs of those that run in its first
// round. A spec cached at the index is used as ReadListed would.
func (c *Client) ReadQueued(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	ref.Namespace = namespace(ref)
	l, ok, cached := c.cache.listing(ref)
	if !ok || cached || l.stop || l.createIndex != l.jobModifyIndex || l.queued == 0 || l.placed > 0 ||
		l.meta[contract.MetaEnabled] != "true" || l.submitTime <= 0 {
		return c.read(ctx, ref, true)
	}
	submit := time.Unix(0, l.submitTime).UTC()
	if s, ok := l.meta[contract.MetaSubmitTime]; ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return c.read(ctx, ref, true) // the full read warns about it
		}
		submit = t.UTC()
	}
	return c.fromList(ctx, ref, l, submit, true, &c.queued)
}

// fromList describes ref from what the list said of it (l) when none of
// its allocations is placed (else it reads the job as ReadListed does:
// what runs needs the spec's groups), counting it in n. queued marks a
// job Nomad queued at its author's count (Unshaped, Listed).
func (c *Client) fromList(ctx context.Context, ref jobs.JobRef, l listed, submit time.Time, queued bool, n *atomic.Int64) (jobs.Job, error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	allocs, err := c.placedAllocs(ctx, ref)
	if err != nil {
		return jobs.Job{}, err
	}
	if len(allocs) > 0 {
		return c.read(ctx, ref, true)
	}
	n.Add(1)
	return jobs.Job{
		JobRef:         ref,
		Meta:           maps.Clone(l.meta),
		JobModifyIndex: l.jobModifyIndex,
		Status:         l.status,
		Stopped:        l.stop,
		SubmitTime:     submit.UTC(),
		Unshaped:       queued,
		Listed:         queued,
	}, nil
}

func (c *Client) read(ctx context.Context, ref jobs.JobRef, cached bool) (jobs.Job, error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	ref.Namespace = namespace(ref)
	job, submit, known, err := c.spec(ctx, ref, cached)
	if err != nil {
		return jobs.Job{}, err
	}
	j := jobs.Job{
		JobRef:         ref,
		Meta:           maps.Clone(job.Meta),
		JobModifyIndex: *job.JobModifyIndex,
		Status:         deref(job.Status),
		Stopped:        deref(job.Stop),
		SubmitTime:     submit,
	}
	if known != nil {
		// The status moves without a new JobModifyIndex; the list has it.
		j.Status, j.Stopped = known.status, known.stop
	}
	if j.Meta == nil {
		j.Meta = map[string]string{}
	}
	g, problem := workerGroup(job, c.dev)
	switch {
	case job.Meta[contract.MetaEnabled] != "true":
		j.Problem = ErrNotManaged.Error()
	case problem != "":
		j.Problem = problem
	default:
		j.Placement = specPlacement(job, g, c.dev)
		j.Unshaped = len(j.Placement) == 0 && g.Meta[contract.MetaNode] == "" && count(g) >= 1
	}
	if j.Running, j.Started, err = c.running(ctx, ref, job, cached); err != nil {
		return jobs.Job{}, err
	}
	return j, nil
}

// spec returns the job's spec and first submission time: from the cache
// when the job list shows it unchanged (with what the list says of the
// job), else read from Nomad and cached.
func (c *Client) spec(ctx context.Context, ref jobs.JobRef, cached bool) (*api.Job, time.Time, *listed, error) {
	if s, l, ok := c.cache.spec(ref); ok && cached {
		return s.job, s.submit, &l, nil
	}
	job, err := c.info(ctx, ref)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	submit, err := c.submitTime(ctx, ref, job)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	c.cache.remember(ref, job, submit)
	return job, submit, nil, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// submitTime is the job's first submission: the pollux_submit_time meta key
// if Apply wrote one, else the oldest version Nomad keeps.
func (c *Client) submitTime(ctx context.Context, ref jobs.JobRef, job *api.Job) (time.Time, error) {
	if s, ok := job.Meta[contract.MetaSubmitTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
		c.log.Warn("ignoring malformed meta key", "job_id", ref.String(), "key", contract.MetaSubmitTime, "value", s)
	}
	first := deref(job.SubmitTime)
	if deref(job.Version) > 0 {
		versions, _, _, err := c.api.Jobs().Versions(ref.ID, false, c.query(ctx, ref.Namespace))
		if err != nil {
			if isNotFound(err) {
				return time.Time{}, fmt.Errorf("failed to read versions of job %s: %w", ref, errors.Join(contract.ErrNotFound, err))
			}
			return time.Time{}, fmt.Errorf("failed to read versions of job %s: %w", ref, Classify(err, "reading versions of job "+ref.String(), NeedNamespace("read-job", ref.Namespace)))
		}
		// An operator's re-registration from the author's file drops
		// pollux_submit_time, and Nomad prunes old versions: the earliest
		// of what every kept version says (its recorded first submission,
		// else its own submit time) survives any number of updates, since
		// each of the controller's writes carries the key forward.
		for _, v := range versions {
			if t := deref(v.SubmitTime); t > 0 && t < first {
				first = t
			}
			if s, ok := v.Meta[contract.MetaSubmitTime]; ok {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil && t.UnixNano() < first {
					first = t.UnixNano()
				}
			}
		}
	}
	return time.Unix(0, first).UTC(), nil
}

// jobAllocs lists the placed allocations of one job.
func (c *Client) jobAllocs(ctx context.Context, ref jobs.JobRef) ([]*api.AllocationListStub, error) {
	q := c.query(ctx, ref.Namespace)
	q.Filter = fmt.Sprintf(`JobID == %s and (ClientStatus == "running" or ClientStatus == "pending") and DesiredStatus == "run"`, strconv.Quote(ref.ID))
	q.Params = map[string]string{"resources": "true"}
	allocs, _, err := c.api.Allocations().List(q)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations of job %s: %w", ref, Classify(err, "listing allocations of job "+ref.String(), NeedNamespace("read-job", ref.Namespace)))
	}
	return allocs, nil
}

// allocIndex matches the "[index]" suffix of an allocation name.
var allocIndex = regexp.MustCompile(`\[(\d+)\]$`)

// running returns the GPUs held by the job's placed allocations (pending or
// running, desired to run: a pending allocation already holds its devices), per node,
// nodes ordered by their group's rank (then allocation index, then ID).
// With shared, the allocations come from the listing shared by a round's
// reads (placedAllocs), else from a listing of the job's own. It also
// returns when the newest of those allocations was created (zero if none).
func (c *Client) running(ctx context.Context, ref jobs.JobRef, job *api.Job, shared bool) (_ []jobs.NodeGPUs, started time.Time, err error) {
	var allocs []*api.AllocationListStub
	if shared {
		allocs, err = c.placedAllocs(ctx, ref)
	} else {
		allocs, err = c.jobAllocs(ctx, ref)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	const unranked = 1 << 30
	rank := map[string]int{}
	for _, tg := range job.TaskGroups {
		if r, ok := groupRank(tg); ok {
			rank[groupName(tg)] = r
		}
	}
	type key struct{ rank, index int }
	gpus := map[string]int{}
	order := map[string]key{}
	for _, a := range allocs {
		placed := a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending
		if a.JobID != ref.ID || !placed || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		n, err := c.allocDevices(ctx, a)
		if err != nil {
			return nil, time.Time{}, err
		}
		if n == 0 {
			continue
		}
		if t := time.Unix(0, a.CreateTime); a.CreateTime > 0 && t.After(started) {
			started = t
		}
		k := key{unranked, unranked}
		if r, ok := rank[a.TaskGroup]; ok {
			k.rank = r
		}
		if m := allocIndex.FindStringSubmatch(a.Name); m != nil {
			k.index, _ = strconv.Atoi(m[1])
		}
		if old, ok := order[a.NodeID]; !ok || k.rank < old.rank || (k.rank == old.rank && k.index < old.index) {
			order[a.NodeID] = k
		}
		gpus[a.NodeID] += n
	}
	out := make([]jobs.NodeGPUs, 0, len(gpus))
	for node, n := range gpus {
		out = append(out, jobs.NodeGPUs{Node: node, GPUs: n})
	}
	slices.SortFunc(out, func(a, b jobs.NodeGPUs) int {
		ka, kb := order[a.Node], order[b.Node]
		return cmp.Or(cmp.Compare(ka.rank, kb.rank), cmp.Compare(ka.index, kb.index), cmp.Compare(a.Node, b.Node))
	})
	if len(out) == 0 {
		return nil, time.Time{}, nil
	}
	return out, started.UTC(), nil
}

// allocDevices counts the distinct device IDs of the configured type an
// allocation holds, reading the allocation when its stub lacks resources.
func (c *Client) allocDevices(ctx context.Context, a *api.AllocationListStub) (int, error) {
	res := a.AllocatedResources
	if res == nil {
		full, _, err := c.api.Allocations().Info(a.ID, c.query(ctx, a.Namespace))
		if err != nil {
			if isNotFound(err) {
				return 0, nil // garbage-collected meanwhile
			}
			return 0, fmt.Errorf("failed to read allocation %s: %w", a.ID, Classify(err, "reading allocation "+a.ID, NeedNamespace("read-job", a.Namespace)))
		}
		res = full.AllocatedResources
	}
	return len(c.deviceIDs(res)), nil
}

// deviceIDs returns the distinct device IDs of the configured type in res.
func (c *Client) deviceIDs(res *api.AllocatedResources) []string {
	if res == nil {
		return nil
	}
	seen := map[string]bool{}
	var ids []string
	for _, t := range res.Tasks {
		if t == nil {
			continue
		}
		for _, d := range t.Devices {
			if d == nil || !c.dev.matchesInstance(d.Vendor, d.Type, d.Name) {
				continue
			}
			for _, id := range d.DeviceIDs {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// Nodes returns the ready, eligible, non-draining nodes (of Config.NodePool,
// if set), sorted by name, with their healthy instances of the configured
// device and the instances held by allocations that are not terminal and
// belong to jobs the controller does not manage.
func (c *Client) Nodes(ctx context.Context) ([]jobs.Node, error) {
	return c.nodes(ctx, nil)
}

// NodePools lists the names of the cluster's node pools (Nomad 1.6+),
// against which the controller checks its autoscaling configuration.
func (c *Client) NodePools(ctx context.Context) ([]string, error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	pools, _, err := c.api.NodePools().List(c.query(ctx, ""))
	if err != nil {
		return nil, fmt.Errorf("failed to list node pools: %w", Classify(err, "listing node pools", NeedNode))
	}
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.Name)
	}
	return out, nil
}

// NodesFor is Nodes with the jobs the controller manages given (the
// round's ListJobs), so that they need not be listed again.
func (c *Client) NodesFor(ctx context.Context, managed []jobs.JobRef) ([]jobs.Node, error) {
	set := make(map[jobs.JobRef]bool, len(managed))
	for _, r := range managed {
		set[r] = true
	}
	return c.nodes(ctx, set)
}

// nodes lists the nodes; tagged, if not nil, is the set of managed jobs.
func (c *Client) nodes(ctx context.Context, tagged map[jobs.JobRef]bool) ([]jobs.Node, error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	q := c.query(ctx, "")
	q.Params = map[string]string{"resources": "true"}
	stubs, _, err := c.api.Nodes().List(q)
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", Classify(err, "listing nodes", NeedNode))
	}
	var out []jobs.Node
	index := map[string]int{}
	src := c.typeSource()
	for _, s := range stubs {
		if s.Status != api.NodeStatusReady || s.SchedulingEligibility != api.NodeSchedulingEligible || s.Drain {
			continue
		}
		if c.cfg.NodePool != "" && s.NodePool != c.cfg.NodePool {
			continue
		}
		res := s.NodeResources
		if res == nil {
			n, _, err := c.api.Nodes().Info(s.ID, c.query(ctx, ""))
			if err != nil {
				if isNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("failed to read node %s: %w", s.Name, Classify(err, "reading node "+s.Name, NeedNode))
			}
			res = n.NodeResources
		}
		gpus, model, most := 0, "", 0
		if res != nil {
			for _, d := range res.Devices {
				if d == nil || !c.dev.matchesInstance(d.Vendor, d.Type, d.Name) {
					continue
				}
				healthy := 0
				for _, inst := range d.Instances {
					if inst != nil && inst.Healthy {
						healthy++
					}
				}
				gpus += healthy
				if healthy > most {
					model, most = d.Name, healthy // a node has one GPU type: its most numerous model
				}
			}
		}
		switch src.Kind {
		case "meta", "attr":
			if model, err = c.nodeModelOf(ctx, s, src); err != nil {
				return nil, err
			}
		case "":
			model = ""
		}
		index[s.ID] = len(out)
		out = append(out, jobs.Node{ID: s.ID, Name: s.Name, NodePool: s.NodePool, GPUs: gpus, GPUModel: model})
	}
	if len(out) == 0 {
		return out, nil
	}
	if tagged == nil {
		var err error
		if tagged, err = c.taggedJobs(ctx); err != nil {
			return nil, err
		}
	}
	q = c.query(ctx, "*")
	q.Filter = `DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed" and ClientStatus != "lost"`
	q.Params = map[string]string{"resources": "true"}
	at := c.cache.clock()
	allocs, _, err := c.api.Allocations().List(q)
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", Classify(err, "listing allocations in every namespace (to count the GPUs other jobs hold)", NeedNamespace("read-job", "*")))
	}
	c.cache.storeAllocs(allocs, at)
	for _, a := range allocs {
		i, ok := index[a.NodeID]
		if !ok || tagged[jobs.JobRef{Namespace: cmp.Or(a.Namespace, "default"), ID: a.JobID}] {
			continue
		}
		n, err := c.allocDevices(ctx, a)
		if err != nil {
			return nil, err
		}
		out[i].UsedByOthers += n
		if n > 0 {
			out[i].OtherJobs = addOther(out[i].OtherJobs, jobs.JobRef{Namespace: cmp.Or(a.Namespace, "default"), ID: a.JobID}, n)
		}
	}
	slices.SortFunc(out, func(a, b jobs.Node) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// addOther adds n GPUs of job to others, kept sorted by name; a job
// outside the default namespace is named "namespace/ID".
func addOther(others []contract.OtherJob, job jobs.JobRef, n int) []contract.OtherJob {
	name := job.ID
	if job.Namespace != "default" {
		name = job.Namespace + "/" + job.ID
	}
	i, found := slices.BinarySearchFunc(others, name, func(o contract.OtherJob, name string) int { return cmp.Compare(o.Job, name) })
	if found {
		others[i].GPUs += n
		return others
	}
	return slices.Insert(others, i, contract.OtherJob{Job: name, GPUs: n})
}

// taggedJobs returns the set of jobs the controller manages.
func (c *Client) taggedJobs(ctx context.Context) (map[jobs.JobRef]bool, error) {
	refs, _, err := c.ListJobs(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	set := make(map[jobs.JobRef]bool, len(refs))
	for _, r := range refs {
		set[r] = true
	}
	return set, nil
}

// Apply rewrites one job as the change says: one task group per node of
// the placement (see the package documentation) and the change's meta keys,
// registered with check-and-set on c.JobModifyIndex. It returns the job's
// new JobModifyIndex. If the job changed since it was read, the error wraps
// contract.ErrConflict and nothing is written; a missing job gives
// contract.ErrNotFound, an untagged one ErrNotManaged.
func (c *Client) Apply(ctx context.Context, ch jobs.Change) (uint64, error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	ref := ch.Job
	ref.Namespace = namespace(ref)
	log := c.log.With("job_id", ref.String())
	// The spec the round read at ch.JobModifyIndex, else a fresh read: the
	// write is a check-and-set at that index either way.
	job, submit, cached := c.cache.at(ref, ch.JobModifyIndex)
	if !cached {
		var err error
		if job, err = c.info(ctx, ref); err != nil {
			return 0, fmt.Errorf("failed to apply change: %w", err)
		}
		if submit, err = c.submitTime(ctx, ref, job); err != nil {
			return 0, fmt.Errorf("failed to apply change: %w", err)
		}
		// Cached as read (a job ReadParked described from the list): if
		// the write fails, the next round reads the spec from the cache.
		if cp, err := copyJob(job); err == nil {
			c.cache.remember(ref, cp, submit)
		}
	}
	if job.Meta[contract.MetaEnabled] != "true" {
		return 0, fmt.Errorf("failed to apply change to job %s: %w", ref, ErrNotManaged)
	}
	if !c.managed(ref.Namespace) {
		return 0, fmt.Errorf("failed to apply change to job %s: namespace %q is not managed", ref, ref.Namespace)
	}
	if got := *job.JobModifyIndex; got != ch.JobModifyIndex {
		log.Info("job changed since it was read; not applying", "read_index", ch.JobModifyIndex, "job_modify_index", got)
		return 0, fmt.Errorf("failed to apply change to job %s: job modify index is %d, change was read at %d: %w",
			ref, got, ch.JobModifyIndex, contract.ErrConflict)
	}
	g, problem := workerGroup(job, c.dev)
	if problem != "" {
		return 0, fmt.Errorf("failed to apply change to job %s: %s", ref, problem)
	}
	if _, ok := job.Meta[contract.MetaSubmitTime]; !ok {
		job.Meta[contract.MetaSubmitTime] = submit.Format(time.RFC3339Nano)
	}
	if err := reshape(job, g, ch.Placement, c.dev, gpuTypeConstraint(c.typeSource(), ch.GPUModels)); err != nil {
		return 0, fmt.Errorf("failed to apply change to job %s: %w", ref, err)
	}
	if _, ok := ch.Meta[contract.MetaGPUType]; !ok {
		delete(job.Meta, contract.MetaGPUType)
	}
	maps.Copy(job.Meta, ch.Meta)
	job.Meta[contract.MetaEnabled] = "true"

	if c.cfg.Lease != nil {
		term, end, err := c.cfg.Lease()
		if err != nil {
			log.Warn("not registering the job: no leader lease", "error", err)
			return 0, fmt.Errorf("failed to apply change to job %s: %w: %w", ref, ErrNoLease, err)
		}
		job.Meta[contract.MetaTerm] = term
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	marker := writeMarker(job.Meta[contract.MetaTerm], ch)
	job.Meta[contract.MetaWrite] = marker
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: ch.JobModifyIndex}
	w := (&api.WriteOptions{Namespace: ref.Namespace}).WithContext(ctx)
	resp, _, err := c.api.Jobs().RegisterOpts(job, opts, w)
	if err != nil && unknownOutcome(err) {
		// The registration may have been committed although its answer
		// was lost (a dropped connection, a timeout, the Nomad leader
		// lost while committing the log): never write again before the
		// job is read back from the leader and the marker tells.
		index, rerr := c.readBack(ctx, ref, ch.JobModifyIndex, marker, err)
		c.cache.forget(ref)
		if rerr != nil {
			return 0, rerr
		}
		log.Warn("the registration's answer was lost, and reading the job back shows it landed", "error", err, "job_modify_index", index, "write", marker)
		return index, nil
	}
	if err != nil {
		if isConflict(err) {
			log.Info("job changed since it was read; not applied", "read_index", ch.JobModifyIndex)
			return 0, fmt.Errorf("failed to register job %s: %w", ref, errors.Join(contract.ErrConflict, err))
		}
		if isNotFound(err) {
			return 0, fmt.Errorf("failed to register job %s: %w", ref, errors.Join(contract.ErrNotFound, err))
		}
		return 0, fmt.Errorf("failed to register job %s: %w", ref, Classify(err, "registering job "+ref.String(), NeedNamespace("submit-job", ref.Namespace)))
	}
	if resp.Warnings != "" {
		log.Debug("register warnings", "warnings", resp.Warnings)
	}
	index := resp.JobModifyIndex
	if index == 0 {
		fresh, err := c.info(ctx, ref)
		if err != nil {
			return 0, fmt.Errorf("failed to read back applied change: %w", err)
		}
		index = *fresh.JobModifyIndex
	}
	// What was written is the spec at the new index: cache it, so that the
	// next round need not read it back (an unknown index: read it then).
	*job.JobModifyIndex = index
	if resp.JobModifyIndex != 0 {
		c.cache.remember(ref, job, submit)
	} else {
		c.cache.forget(ref)
	}
	log.Debug("applied placement", "placement", formatPlacement(ch.Placement), "job_modify_index", index, "eval_id", resp.EvalID)
	return index, nil
}

// writeMarker returns the pollux_write marker of a registration:
// "<term>/<round>/<digest>", where the digest hashes what the change
// writes (placement, GPU models, the decision's meta), so that a vacate
// and the placement that follows it in one round differ while one change
// written twice does not.
func writeMarker(term string, ch jobs.Change) string {
	if term == "" {
		term = "0"
	}
	h := sha256.New()
	for _, p := range ch.Placement {
		fmt.Fprintf(h, "p %s %d\n", p.Node, p.GPUs)
	}
	for _, m := range ch.GPUModels {
		fmt.Fprintf(h, "m %s\n", m)
	}
	for _, k := range slices.Sorted(maps.Keys(ch.Meta)) {
		fmt.Fprintf(h, "k %s=%s\n", k, ch.Meta[k])
	}
	return term + "/" + ch.Meta[contract.MetaRound] + "/" + hex.EncodeToString(h.Sum(nil)[:6])
}

// unknownOutcome reports whether a failed registration may nonetheless
// have been committed: no answer at all (a transport error, a timeout),
// or a server error (Nomad answers 500 "leadership lost while committing
// log" for a log entry the next leader may still commit; see
// hashicorp/raft#561). A 4xx answer is a refusal.
func unknownOutcome(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		return ue.StatusCode() >= http.StatusInternalServerError
	}
	return true
}

// readBackTimeout bounds how long readBack waits for a Nomad leader that
// answers (an election takes a few seconds).
const readBackTimeout = 20 * time.Second

// readBack decides the outcome of a registration whose answer was lost
// (werr) by reading the job from the Nomad leader (a consistent read,
// retried until one answers): the job's index moved and its pollux_write
// is marker, the write landed (its index is returned); the index is still
// readIndex, it did not land as far as the leader knows (the error says
// so, and the caller's recorded intent leaves the last word to the next
// round); the index moved under another marker, another write came first
// (contract.ErrConflict).
func (c *Client) readBack(ctx context.Context, ref jobs.JobRef, readIndex uint64, marker string, werr error) (uint64, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	log := c.log.With("job_id", ref.String(), "write", marker)
	var last error
	for attempt := 0; ; attempt++ {
		job, err := c.info(rctx, ref)
		switch {
		case err == nil && *job.JobModifyIndex == readIndex:
			return 0, fmt.Errorf("failed to register job %s: %w (read back from the leader: not applied)", ref, werr)
		case err == nil && job.Meta[contract.MetaWrite] == marker:
			return *job.JobModifyIndex, nil
		case err == nil:
			log.Warn("the registration's answer was lost, and the job read back was written by another", "read_index", readIndex, "job_modify_index", *job.JobModifyIndex, "job_write", job.Meta[contract.MetaWrite])
			return 0, fmt.Errorf("failed to register job %s: %w; read back at index %d written by %q: %w", ref, werr, *job.JobModifyIndex, job.Meta[contract.MetaWrite], contract.ErrConflict)
		case errors.Is(err, contract.ErrNotFound):
			return 0, fmt.Errorf("failed to register job %s: %w; read back: %w", ref, werr, err)
		}
		last = err
		if attempt == 0 {
			log.Info("the registration's answer was lost; reading the job back from the leader", "error", werr)
		}
		select {
		case <-rctx.Done():
			return 0, fmt.Errorf("failed to register job %s: %w; outcome unknown: could not read it back within %v: %v", ref, werr, readBackTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// formatPlacement renders a placement as pollux_placement does.
func formatPlacement(p []jobs.NodeGPUs) string {
	parts := make([]string, len(p))
	for i, ng := range p {
		parts[i] = ng.Node + ":" + strconv.Itoa(ng.GPUs)
	}
	return strings.Join(parts, ",")
}
