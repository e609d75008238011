# The Pollux agent's configuration in HCL (`pollux agent -config pollux.hcl`),
# the same settings as config.example.json. Every field is optional; the
# document pollux/config in Consul KV (JSON) wins field by field.
interval               = "60s"
# fairness_p           = -1   # unset: -1 on one GPU type, 0.5 on several
restart_penalty        = "30s"
device                 = "nvidia/gpu"
max_gpus_per_job       = 32
dry_run                = false
interference_avoidance = true
explore_factor         = 4
explore_start          = 4

# GPU types (off unless gpu_type_source is set): where a node's GPU model
# name comes from, and how names map to types. See docs/operators.md, "GPU types".
# gpu_type_source = "device.model"          # or "meta.gpu_type", "attr.<key>"
# gpu_type_map    = { "NVIDIA L4" = "l4" }  # over the built-in NVIDIA rules
# gpu_type_speed  = { l4 = 1.3 }            # over t4 1, v100 1.8, a100 2, ...

ga {
  population  = 100
  generations = 100
  seed        = 1
}
