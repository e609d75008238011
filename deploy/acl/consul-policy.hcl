# Least-privilege Consul ACL policy for the Pollux controller. Create it and
# a token with:
#
#   consul acl policy create -name pollux -description "Pollux controller" -rules @deploy/acl/consul-policy.hcl
#   consul acl token create -description "pollux controller" -policy-name pollux
#
# and give the agent the token's SecretID as CONSUL_HTTP_TOKEN. With another
# kv_prefix, replace "pollux/" below by it.

# The controller's keys (contracts.md section 2), all under its prefix:
#   pollux/config                    read: the operator's configuration (watched)
#   pollux/status, pollux/term       write: the last round, the current term
#   pollux/jobs/<ns>/<id>/metrics    read: what the workers report
#   pollux/jobs/<ns>/<id>/decision   write: the decision a worker follows
#   pollux/jobs/<ns>/<id>/state      write: the fitted model, pending writes
#   pollux/leader                    write: the leader lock (acquire/release
#                                    with the session below)
# "write" includes "read" (and the check-and-set and delete the KV adapter
# offers). Nothing outside the prefix is read or written. The workers'
# tokens (metrics, checkpoint) are separate: they need write on their own
# job's keys only, e.g. key_prefix "pollux/jobs/<ns>/<id>/".
key_prefix "pollux/" {
  policy = "write"
}

# The leader lock is held by a Consul session, created, renewed every TTL/2
# and destroyed by the controller. Consul checks session "write" on the
# node of the agent the session is created on, which is whichever Consul
# agent the controller talks to, so the rule covers every node name
# (prefix ""). Sessions hold no data; this grants nothing else.
session_prefix "" {
  policy = "write"
}
