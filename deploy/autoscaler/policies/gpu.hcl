# Cluster scaling policy of the node pool "gpu" (GPU type "" on a cluster
# of one type; on a typed cluster one file per pool and type, with the
# gpu_type label set). Copy it per pool; keep min/max equal to the
# autoscaling section of the Pollux agent's config (Pollux's own bounds),
# as the autoscaler clamps to these too.
scaling "pollux-gpu" {
  enabled = true
  type    = "cluster"
  min     = 0
  max     = 32

  policy {
    # Pollux already waits before it shrinks (its scale-down delay) and
    # keeps a size while its utility stays in the band: no further
    # smoothing here, only a cooldown that covers a node's boot.
    cooldown            = "5m"
    evaluation_interval = "1m"

    check "pollux_desired_nodes" {
      source = "prometheus"
      # max(): one value even if two Pollux agents (leader and follower)
      # are scraped; only the leader publishes the gauge.
      query        = "max(pollux_cluster_desired_nodes{node_pool=\"gpu\",gpu_type=\"\"})"
      query_window = "2m"

      strategy "pass-through" {}
    }

    # The instance group of this pool. Pollux moves jobs off the nodes it
    # wants removed first, so "empty_ignore_system" removes only the
    # emptied nodes (least_busy is the fallback if none is empty yet).
    target "aws-asg" {
      aws_asg_name           = "pollux-gpu"
      node_pool              = "gpu"
      node_drain_deadline    = "15m"
      node_selector_strategy = "empty_ignore_system"
      node_purge             = "true"
    }
  }
}
