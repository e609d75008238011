# The Nomad Autoscaler as a Nomad job, configured for Pollux
# (agent.hcl, policies/). Run: nomad job run deploy/autoscaler/autoscaler.nomad.hcl
# It runs the autoscaler binary scripts/install-autoscaler.sh builds (or the
# release one) with raw_exec on a node of the "default" (CPU) pool, never on
# a GPU node the autoscaler might remove.
variable "autoscaler_binary" {
  type        = string
  default     = "/usr/local/bin/nomad-autoscaler"
  description = "path of nomad-autoscaler on the client (scripts/install-autoscaler.sh puts it in ~/.cache/pollux/bin)"
}

variable "prometheus_address" {
  type    = string
  default = "http://127.0.0.1:9090"
}

job "nomad-autoscaler" {
  type      = "service"
  node_pool = "default"

  group "autoscaler" {
    count = 1

    task "autoscaler" {
      driver = "raw_exec"

      config {
        command = var.autoscaler_binary
        args = [
          "agent",
          "-config", "${NOMAD_TASK_DIR}/agent.hcl",
          "-policy-dir", "${NOMAD_TASK_DIR}/policies",
        ]
      }

      env {
        NOMAD_ADDR = "http://${attr.unique.network.ip-address}:4646"
      }

      # agent.hcl with the Prometheus address of this deployment.
      template {
        destination = "${NOMAD_TASK_DIR}/agent.hcl"
        data        = <<-EOT
          log_level = "INFO"
          http {
            bind_address = "127.0.0.1"
            bind_port    = 8080
          }
          apm "prometheus" {
            driver = "prometheus"
            config = { address = "${var.prometheus_address}" }
          }
          strategy "pass-through" {
            driver = "pass-through"
          }
          # target "aws-asg" { driver = "aws-asg" config = { aws_region = "us-east-1" } }
          policy {
            default_cooldown            = "5m"
            default_evaluation_interval = "1m"
          }
        EOT
      }

      # One policy per pool: deploy/autoscaler/policies/*.hcl, from a Nomad
      # variable so that an operator edits them without a new job version
      # (nomad var put nomad/jobs/nomad-autoscaler gpu=@deploy/autoscaler/policies/gpu.hcl).
      template {
        destination = "${NOMAD_TASK_DIR}/policies/gpu.hcl"
        change_mode = "signal"
        change_signal = "SIGHUP"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/nomad-autoscaler" }}{{ .gpu }}{{ end }}
        EOT
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
