package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// LoadConfigFile reads the agent's configuration file and merges it into
// the defaults. A name ending in .hcl is HCL, one ending in .json is JSON;
// any other name is JSON if its first non-blank character is {, HCL
// otherwise. Both use the field names of the KV document (which stays
// JSON); in HCL the genetic algorithm's settings are a ga block and the
// Pollux policy's other knobs a pollux block (PolluxKnobs), where a knob
// may be the word "off":
//
//	interval   = "60s"
//	fairness_p = -1
//	ga {
//	  population        = 100
//	  stall_generations = "off"
//	}
//	pollux {
//	  restart_hysteresis = 0.45
//	  service_weight     = "off"
//	}
//
// Errors name the file, and for HCL the line and column of the field.
func LoadConfigFile(path string) (Config, error) {
	def := DefaultConfig()
	src, err := os.ReadFile(path)
	if err != nil {
		return def, fmt.Errorf("failed to read configuration: %w", err)
	}
	if configIsHCL(path, src) {
		return def.MergeHCL(src, path)
	}
	cfg, err := def.MergeJSON(src)
	if err != nil {
		return def, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

func configIsHCL(path string, src []byte) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".hcl":
		return true
	case ".json":
		return false
	}
	return !bytes.HasPrefix(bytes.TrimLeft(src, jsonSpace), []byte("{"))
}

// maxHCLDiagnostics bounds how many of HCL's diagnostics an error lists.
const maxHCLDiagnostics = 8

// MergeHCL applies the attributes present in an HCL configuration (native
// syntax; filename is used in messages only) to c and validates the
// result. An unknown attribute or block, a value of the wrong type, an
// expression that needs variables or functions, a bad duration and an
// invalid value are errors that give filename, line and column and name
// the field. An empty file changes nothing. An autoscaling block sets
// Autoscale (ParseAutoscaleHCL; without one Autoscale is kept). On error
// c is unchanged.
func (c Config) MergeHCL(src []byte, filename string) (Config, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return c, fmt.Errorf("failed to parse configuration: %w", diagError(diags, nil))
	}
	body := file.Body.(*hclsyntax.Body) // what hclsyntax.ParseConfig returns
	attrs := attributes(body)
	// The autoscaling block has a parser of its own (ParseAutoscaleHCL).
	rest := *body
	rest.Blocks = nil
	scaling := false
	for _, b := range body.Blocks {
		if b.Type == "autoscaling" {
			scaling = true
			continue
		}
		rest.Blocks = append(rest.Blocks, b)
	}
	var d configDoc
	if diags := gohcl.DecodeBody(&rest, nil, &d); diags.HasErrors() {
		return c, fmt.Errorf("invalid configuration: %w", diagError(diags, attrs))
	}
	var scaler AutoscaleConfig
	if scaling {
		var err error
		if scaler, err = ParseAutoscaleHCL(src, filename); err != nil {
			return c, err
		}
	}
	out, err := c.merge(&d, func(field string) string {
		if a, ok := attrs[field]; ok {
			return a.Expr.Range().String() + ": "
		}
		return ""
	})
	if err == nil && scaling {
		out.Autoscale = scaler
	}
	return out, err
}

// attributes returns the body's attributes and those of its blocks, by
// field name (ga.population for population in a ga block).
func attributes(body *hclsyntax.Body) map[string]*hclsyntax.Attribute {
	out := map[string]*hclsyntax.Attribute{}
	for name, a := range body.Attributes {
		out[name] = a
	}
	for _, b := range body.Blocks {
		for name, a := range b.Body.Attributes {
			out[b.Type+"."+name] = a
		}
	}
	return out
}

// diagError turns HCL's error diagnostics into one error, each with its
// location and, where HCL does not say it, the field it is about (found in
// attrs); at most maxHCLDiagnostics of them, each of bounded length (a
// diagnostic may quote a name of any length).
func diagError(diags hcl.Diagnostics, attrs map[string]*hclsyntax.Attribute) error {
	// In the order of the file (HCL reports some in map order).
	diags = slices.Clone(diags)
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		if a.Subject == nil || b.Subject == nil {
			return 0
		}
		return a.Subject.Start.Byte - b.Subject.Start.Byte
	})
	var errs []error
	n := 0
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if n++; n > maxHCLDiagnostics {
			errs = append(errs, fmt.Errorf("and %d more errors", len(diags.Errs())-maxHCLDiagnostics))
			break
		}
		msg := d.Summary + "; " + d.Detail
		if d.Subject != nil {
			for field, a := range attrs {
				if a.SrcRange.ContainsPos(d.Subject.Start) && !strings.Contains(msg, `"`+a.Name+`"`) {
					msg = field + ": " + msg
					break
				}
			}
			msg = d.Subject.String() + ": " + msg
		}
		errs = append(errs, errors.New(quote.Cut(msg, maxDiagnostic)))
	}
	return errors.Join(errs...)
}

// maxDiagnostic bounds the length of one diagnostic in an error.
const maxDiagnostic = 400
