# Least-privilege Nomad ACL policy for the Pollux controller (pollux agent,
# pollux plan, pollux status). Create it and a token with:
#
#   nomad acl policy apply -description "Pollux controller" pollux deploy/acl/nomad-policy.hcl
#   nomad acl token create -name "pollux controller" -policy pollux -type client
#
# and give the agent the token's Secret ID as NOMAD_TOKEN.
#
# What the controller calls, and the rule each call needs:
#
#   GET  /v1/jobs?namespace=*&filter=...       list the Pollux-tagged jobs      list-jobs
#   GET  /v1/job/:id, /v1/job/:id/versions     a job's spec and first version   read-job
#   GET  /v1/allocations?namespace=*           GPUs held by every allocation    read-job
#   GET  /v1/allocation/:id                    an allocation's devices          read-job
#   GET  /v1/job/:id/evaluations, /summary     whether a reallocation placed    read-job
#   GET  /v1/nodes, /v1/node/:id               nodes and their GPUs             node read
#   GET  /v1/node/pools                        autoscaling pools exist          node_pool read
#   PUT  /v1/job/:id (EnforceIndex)            rewrite a tagged job             submit-job
#
# It never deletes, stops, dispatches or scales jobs through Nomad's
# scaling API, reads logs or files, execs into tasks, or touches ACLs,
# variables, volumes or the operator API, so it gets none of those.

# Every namespace: read only. The controller must see every job and
# allocation on its nodes, also those it does not manage, to know how many
# GPUs other jobs hold (a placement counting GPUs it cannot see would be
# unschedulable). With a narrower rule here, jobs in namespaces the token
# cannot read are invisible: their GPUs look free.
namespace "*" {
  capabilities = ["list-jobs", "read-job"]
}

# The namespaces whose tagged jobs the controller rescales: also
# submit-job, the only write it makes (a check-and-set register of a job
# whose meta has pollux_enabled = "true"). An exact namespace rule replaces
# the "*" one for that namespace, so it repeats list-jobs and read-job. Add
# one block per namespace Pollux manages; jobs tagged in other namespaces
# are then listed but their rewrites are refused (logged as permission
# denied with the namespace).
namespace "default" {
  capabilities = ["list-jobs", "read-job", "submit-job"]
}

# Nodes: their status, eligibility, node pool and device instances (the
# GPUs). Read only; the controller never drains or marks nodes.
node {
  policy = "read"
}

# The node pools, against which the agent checks the pools of its
# autoscaling configuration (Nomad 1.6+).
node_pool "*" {
  policy = "read"
}
