# The Pollux controller as a Nomad system job: one instance per node, one
# leader at a time (a Consul lock on pollux/leader). Deploy with
#   nomad job run -var 'artifact=https://example.internal/pollux_linux_amd64.tar.gz' deploy/pollux.nomad.hcl
# Configuration: an HCL file baked into the task (below) and pollux/config in
# Consul KV (JSON, deploy/config.example.json), which wins field by field.

variable "artifact" {
  type        = string
  description = "URL of a tarball holding the pollux binary (go build -o pollux ./cmd/pollux)"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

# The variables below keep their defaults on a real cluster; the local
# test cluster (e2e/systemjob_test.go) sets them.

variable "driver" {
  type        = string
  default     = "exec"
  description = "task driver: exec (isolated) or raw_exec where exec is not available"
}

variable "http_port" {
  type        = number
  default     = 9505
  description = "static port of /ui, /healthz and /metrics on every node; 0 for a dynamic port (needed when nodes share an address)"
}

variable "nomad_addr" {
  type        = string
  default     = ""
  description = "NOMAD_ADDR for the agent; empty: http://<node address>:4646"
}

variable "consul_addr" {
  type        = string
  default     = ""
  description = "CONSUL_HTTP_ADDR for the agent; empty: <node address>:8500"
}

variable "check_interval" {
  type        = string
  default     = "10s"
  description = "how often Consul checks each instance's /healthz"
}

variable "config" {
  type        = string
  description = "the agent's configuration file (HCL, deploy/config.example.hcl lists every field); pollux/config in Consul KV (JSON) wins field by field"
  default     = <<-EOT
    interval  = "60s"
    device    = "nvidia/gpu"
    kv_prefix = "pollux/"
  EOT
}

variable "tokens_from_variable" {
  type        = bool
  default     = false
  description = "with ACLs: read NOMAD_TOKEN and CONSUL_HTTP_TOKEN from the Nomad variable nomad/jobs/pollux (keys nomad_token, consul_token) through the job's workload identity"
}

job "pollux" {
  type        = "system"
  datacenters = var.datacenters
  # A system job has no namespace restrictions of its own; give its token the
  # policy in deploy/acl/ (read jobs and nodes, submit jobs).

  group "controller" {
    network {
      # A static port when http_port > 0, else a dynamic one.
      dynamic "port" {
        for_each = var.http_port > 0 ? [var.http_port] : []
        labels   = ["http"]
        content {
          static = port.value
        }
      }
      dynamic "port" {
        for_each = var.http_port > 0 ? [] : [0]
        labels   = ["http"]
        content {}
      }
    }

    service {
      name     = "pollux"
      port     = "http"
      provider = "consul"
      check {
        type     = "http"
        path     = "/healthz"
        interval = var.check_interval
        timeout  = "2s"
      }
    }

    task "agent" {
      driver = var.driver

      artifact {
        source = var.artifact
      }

      config {
        command = "local/pollux"
        args    = ["agent", "-config", "local/pollux.hcl", "-http-addr", "0.0.0.0:${NOMAD_PORT_http}", "-log-json"]
      }

      # NOMAD_ADDR, CONSUL_HTTP_ADDR and the tokens come from the node's
      # environment or Nomad workload identity / Vault; set them here if not.
      # With ACLs, store the two least-privilege tokens (deploy/acl/, docs/operators.md,
      # "Access control and TLS") in the Nomad variable nomad/jobs/pollux,
      # which this job's workload identity may read, and run with
      # -var tokens_from_variable=true:
      #
      #   nomad var put nomad/jobs/pollux nomad_token=<secret> consul_token=<secret>
      dynamic "template" {
        for_each = var.tokens_from_variable ? [1] : []
        content {
          destination = "secrets/tokens.env"
          env         = true
          data        = <<-EOT
            {{ with nomadVar "nomad/jobs/pollux" }}
            NOMAD_TOKEN={{ .nomad_token }}
            CONSUL_HTTP_TOKEN={{ .consul_token }}
            {{ end }}
          EOT
        }
      }
      #
      # With TLS, use https:// in NOMAD_ADDR and set NOMAD_CACERT,
      # CONSUL_HTTP_SSL=true and CONSUL_CACERT (and the client certificate
      # variables if the servers verify clients).
      env {
        NOMAD_ADDR       = var.nomad_addr != "" ? var.nomad_addr : "http://${attr.unique.network.ip-address}:4646"
        CONSUL_HTTP_ADDR = var.consul_addr != "" ? var.consul_addr : "${attr.unique.network.ip-address}:8500"
      }

      # The agent's configuration file, in HCL (deploy/config.example.hcl
      # lists every field).
      template {
        destination = "local/pollux.hcl"
        data        = var.config
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
