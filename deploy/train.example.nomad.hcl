# A training job managed by Pollux. Submit once with `nomad job run`; after
# that Pollux reshapes it: one task group per node it places the job on
# ("workers" for rank 0, "workers-r1", "workers-r2", ... for the others),
# each pinned to its node with a ${node.unique.id} constraint and asking
# for that node's number of GPUs. Re-submitting the spec later resets the
# shape; Pollux re-applies its decision at the next round (use
# `nomad job run -preserve-counts` to keep the counts meanwhile).

job "cifar10-resnet18" {
  datacenters = ["*"]
  type        = "batch"

  meta {
    pollux_enabled         = "true"
    pollux_init_batch_size = "128"
    pollux_init_lr         = "0.1"
    pollux_max_batch_size  = "4096"
    pollux_local_bsz_min   = "32"
    pollux_local_bsz_max   = "1024"
    pollux_accumulation    = "true"
    pollux_lr_scaling      = "adascale"
    pollux_max_gpus        = "16"
  }

  group "workers" {
    count = 1

    task "train" {
      driver = "docker"

      config {
        image   = "registry.example.internal/ml/cifar10-resnet18:latest"
        command = "python"
        # The worker reads NOMAD_META_pollux_batch_size, _local_bsz,
        # _accum_steps, _lr, _placement and its group's pollux_rank, and
        # reports metrics to Consul KV at pollux/jobs/<ns>/<job>/metrics.
        args = ["train.py"]
      }

      env {
        CONSUL_HTTP_ADDR = "${attr.unique.network.ip-address}:8500"
      }

      resources {
        cpu    = 4000
        memory = 16384

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
