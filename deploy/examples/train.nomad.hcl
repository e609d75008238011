# A PyTorch training job that Pollux rescales, for real GPUs: Nomad's NVIDIA
# device plugin (nvidia/gpu) and the docker driver. The task is the Pollux
# launcher (python3 -m pollux.torch.launch), which starts one training process
# per GPU Nomad gave the task and connects the job's task groups.
#
# Submit once with `nomad job run train.nomad.hcl`. Pollux then shapes the job
# into one task group per node ("workers" = rank 0, "workers-r1", ... for the
# others), each pinned to its node and asking for that node's GPUs; every
# reallocation restarts the tasks, which resume from their checkpoint.
# Re-submit it with a plain `nomad job run` (docs/operators.md, "Updating a
# job"): Pollux reshapes the new version in its next round.
#
# The image needs Python 3 with torch, the pollux worker package installed
# (pip install ./worker/python) and the training script in /app:
# deploy/examples/Dockerfile builds one (scripts/build-train-image.sh).
#
# The variables below default to a GPU cluster; the end-to-end test runs
# this file as it is with CPU values (`nomad job run -var gpu_device=... `).

variable "image" {
  description = "the training image (deploy/examples/Dockerfile)"
  type        = string
  default     = "registry.example.internal/ml/digits:latest"
}

variable "gpu_device" {
  description = "the device each training process gets one of"
  type        = string
  default     = "nvidia/gpu"
}

variable "consul_addr" {
  description = "the Consul agent the workers report to (host:port)"
  type        = string
  # Nomad interpolates the node attribute at run time.
  default = "$${attr.unique.network.ip-address}:8500"
}

variable "kv_prefix" {
  description = "the Consul KV prefix of the Pollux agent's configuration (kv_prefix)"
  type        = string
  default     = "pollux/"
}

variable "epochs" {
  type    = number
  default = 30
}

variable "train_args" {
  description = "further arguments of train_digits.py (e.g. [\"--step-delay\", \"0.1\"] to slow a CPU run down)"
  type        = list(string)
  default     = []
}

variable "cpu" {
  description = "CPU MHz per task"
  type        = number
  default     = 4000
}

variable "memory" {
  description = "memory MiB per task"
  type        = number
  default     = 16384
}

variable "train_log" {
  description = "a file (inside the task) each replica appends JSON lines to about what it did; empty: none"
  type        = string
  default     = ""
}

job "digits" {
  datacenters = ["*"]
  type        = "batch"

  meta {
    pollux_enabled         = "true"
    pollux_init_batch_size = "64"    # M0: the batch size the script was tuned for
    pollux_init_lr         = "0.05"  # its learning rate at M0
    pollux_max_batch_size  = "512"
    pollux_local_bsz_min   = "8"     # per-GPU micro-batch bounds (memory)
    pollux_local_bsz_max   = "64"
    pollux_accumulation    = "true"
    pollux_lr_scaling      = "sqrt"  # SGD with momentum here; adascale is the default
    pollux_max_gpus        = "16"
    pollux_model           = "digits-mlp"  # jobs naming one model share throughput profiles (several GPU types)
  }

  group "workers" {
    count = 1

    # The rendezvous port: the rank-0 group's processes listen on it (the
    # launcher publishes NOMAD_IP_pollux:NOMAD_HOST_PORT_pollux in Consul KV
    # for the other groups). Pollux copies this block into every per-node
    # group, so each gets its own port.
    network {
      mode = "host"
      port "pollux" {}
    }

    # Checkpoints survive reallocations here. A job that spans nodes needs
    # a volume every node sees (NFS, a CSI volume, ...): rank 0 writes and
    # reads it, and rank 0 may land on another node after a reallocation.
    volume "checkpoints" {
      type      = "host"
      source    = "pollux-checkpoints"
      read_only = false
    }

    restart {
      attempts = 3      # a rendezvous that times out exits non-zero: try again
      delay    = "10s"
      mode     = "fail"
    }

    task "train" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host" # gloo/NCCL open connections between all processes
        command      = "python3"
        args = concat(["-m", "pollux.torch.launch", "--rendezvous-timeout", "300",
        "/app/train_digits.py", "--epochs", "${var.epochs}"], var.train_args)
      }

      volume_mount {
        volume      = "checkpoints"
        destination = "/checkpoints"
      }

      env {
        # One directory per job in the shared volume.
        POLLUX_CHECKPOINT_DIR = "/checkpoints/${NOMAD_NAMESPACE}/${NOMAD_JOB_ID}"
        # Metrics and the rendezvous go to Consul KV under pollux/jobs/<ns>/<job>/.
        CONSUL_HTTP_ADDR      = var.consul_addr
        POLLUX_KV_PREFIX      = var.kv_prefix
        TRAIN_LOG             = var.train_log
        NCCL_SOCKET_IFNAME    = "^lo,docker"
      }

      # On a reallocation Nomad sends SIGTERM: the processes finish the step
      # they are in, save a checkpoint and exit. Give them time to.
      kill_timeout = "60s"

      resources {
        cpu    = var.cpu
        memory = var.memory

        # A block label cannot be an expression: a dynamic block names the
        # device from the variable.
        dynamic "device" {
          for_each = [var.gpu_device]
          labels   = [device.value]
          content {
            count = 1 # Pollux rewrites it per node
          }
        }
      }
    }
  }
}
