# Nomad Autoscaler agent configuration for Pollux-driven cluster scaling.
#
# Pollux computes, per node pool and GPU type, how many GPU nodes the jobs
# can use well and exports it as the Prometheus gauge
#   pollux_cluster_desired_nodes{node_pool="...", gpu_type="..."}
# Prometheus scrapes the Pollux agent; this autoscaler reads the gauge
# (prometheus APM), passes it through unchanged (pass-through strategy) and
# resizes the cloud instance group (target plugin), draining a node before
# removing it. The policies in policies/ tie one pool to one group.

log_level = "INFO"

# Where the Nomad Autoscaler finds plugins other than its built-in ones.
plugin_dir = "/opt/nomad-autoscaler/plugins"

nomad {
  # NOMAD_ADDR and NOMAD_TOKEN in the environment override these.
  address = "http://127.0.0.1:4646"
}

http {
  bind_address = "127.0.0.1"
  bind_port    = 8080
}

apm "prometheus" {
  driver = "prometheus"
  config = {
    # The Prometheus that scrapes the Pollux agent's /metrics.
    address = "http://127.0.0.1:9090"
  }
}

strategy "pass-through" {
  driver = "pass-through"
}

# The cloud's instance groups. Uncomment the one of your cloud; the
# policies name the group of each pool.
#
# target "aws-asg" {
#   driver = "aws-asg"
#   config = {
#     aws_region = "us-east-1"
#     # Credentials: the instance role of the node running the autoscaler
#     # by default; or aws_access_key_id / aws_secret_access_key.
#     # Keep the instances Pollux still uses from being terminated by the
#     # ASG itself: the autoscaler drains and detaches them.
#     scale_in_protection = "true"
#   }
# }
#
# target "gce-mig" { driver = "gce-mig" config = { project = "..." } }
# target "azure-vmss" { driver = "azure-vmss" config = { subscription_id = "..." } }

policy {
  # One file per pool (see policies/).
  dir = "/etc/nomad-autoscaler/policies"
  # A pool's size changes at most once per cooldown: long enough for a new
  # node to boot and register, so that the gauge reflects it.
  default_cooldown            = "5m"
  default_evaluation_interval = "1m"
}
