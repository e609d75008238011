# The Pollux agent's configuration in HCL (`pollux agent -config pollux.hcl`),
# the same settings as config.example.json. Every field is optional; the
# document pollux/config in Consul KV (JSON) wins field by field.
interval               = "60s"
fairness_p             = -1
restart_penalty        = "30s"
device                 = "nvidia/gpu"
max_gpus_per_job       = 32
dry_run                = false
interference_avoidance = true
explore_factor         = 4

ga {
  population  = 100
  generations = 100
  seed        = 1
}
