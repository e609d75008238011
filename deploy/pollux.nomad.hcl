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

job "pollux" {
  type        = "system"
  datacenters = var.datacenters
  # A system job has no namespace restrictions of its own; give its token the
  # policy in deploy/acl/ (read jobs and nodes, submit jobs).

  group "controller" {
    network {
      port "http" {
        static = 9505
      }
    }

    service {
      name     = "pollux"
      port     = "http"
      provider = "consul"
      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "agent" {
      driver = "exec"

      artifact {
        source = var.artifact
      }

      config {
        command = "local/pollux"
        args    = ["agent", "-config", "local/pollux.hcl", "-http-addr", "0.0.0.0:${NOMAD_PORT_http}", "-log-json"]
      }

      # NOMAD_ADDR, CONSUL_HTTP_ADDR and the tokens come from the node's
      # environment or Nomad workload identity / Vault; set them here if not.
      # With ACLs, store the two least-privilege tokens (deploy/acl/, README
      # "Access control and TLS") in the Nomad variable nomad/jobs/pollux,
      # which this job's workload identity may read, and uncomment:
      #
      # template {
      #   destination = "secrets/tokens.env"
      #   env         = true
      #   data        = <<-EOT
      #     {{ with nomadVar "nomad/jobs/pollux" }}
      #     NOMAD_TOKEN={{ .nomad_token }}
      #     CONSUL_HTTP_TOKEN={{ .consul_token }}
      #     {{ end }}
      #   EOT
      # }
      #
      # With TLS, use https:// in NOMAD_ADDR and set NOMAD_CACERT,
      # CONSUL_HTTP_SSL=true and CONSUL_CACERT (and the client certificate
      # variables if the servers verify clients).
      env {
        NOMAD_ADDR       = "http://${attr.unique.network.ip-address}:4646"
        CONSUL_HTTP_ADDR = "${attr.unique.network.ip-address}:8500"
      }

      # The agent's configuration file, in HCL (deploy/config.example.hcl
      # lists every field).
      template {
        destination = "local/pollux.hcl"
        data        = <<-EOT
          interval  = "60s"
          device    = "nvidia/gpu"
          kv_prefix = "pollux/"
        EOT
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
