// Command k8sschema turns the Kubernetes API's OpenAPI v2 document
// (api/openapi-spec/swagger.json of the k8s.io/kubernetes module) into
// the strict JSON schemas kubeconform reads, one file a kind named as
// kubeconform names it (deployment-apps-v1.json, service-v1.json), each
// standalone (the definitions it reaches inlined). Strict: an object with
// properties takes no others, so that a misspelled field fails. As the
// schemas kubeconform fetches by default: an int-or-string is either, a
// quantity a string or a number, and every value may be null (YAML's
// empty value). scripts/check-chart runs it; the schemas are made where
// the check runs, not kept in the repository.
//
//	k8sschema SWAGGER.json OUTDIR
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: k8sschema SWAGGER.json OUTDIR")
		os.Exit(2)
	}
	n, err := convert(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sschema:", err)
		os.Exit(1)
	}
	fmt.Printf("k8sschema: %d kinds' schemas in %s\n", n, os.Args[2])
}

// gvk is a definition's x-kubernetes-group-version-kind.
type gvk struct {
	Group, Version, Kind string
}

// convert writes a schema for each kind of the document at in to out.
func convert(in, out string) (int, error) {
	raw, err := os.ReadFile(in)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("%s: %w", in, err)
	}
	if len(doc.Definitions) == 0 {
		return 0, fmt.Errorf("%s: no definitions", in)
	}
	defs := map[string]any{}
	for name, d := range doc.Definitions {
		defs[name] = strict(name, d)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for name, d := range doc.Definitions {
		var kinds []gvk
		if b, err := json.Marshal(d["x-kubernetes-group-version-kind"]); err == nil {
			_ = json.Unmarshal(b, &kinds)
		}
		for _, k := range kinds {
			if k.Kind == "" || strings.HasSuffix(k.Kind, "List") || k.Kind == "DeleteOptions" || k.Kind == "WatchEvent" {
				continue
			}
			schema := map[string]any{"$ref": "#/definitions/" + name, "definitions": reachable(defs, name)}
			b, err := json.Marshal(schema)
			if err != nil {
				return n, err
			}
			if err := os.WriteFile(filepath.Join(out, fileName(k)), b, 0o644); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// fileName is kubeconform's name for a kind's schema: kind, the group's
// first label, version (the core group has none).
func fileName(k gvk) string {
	name := strings.ToLower(k.Kind)
	if k.Group != "" {
		name += "-" + strings.Split(k.Group, ".")[0]
	}
	return name + "-" + strings.ToLower(k.Version) + ".json"
}

// strict returns a definition made strict, as the package comment says.
func strict(name string, d map[string]any) any {
	switch {
	case strings.HasSuffix(name, ".util.intstr.IntOrString") || d["format"] == "int-or-string":
		return oneOf(name, "string", "integer")
	case strings.HasSuffix(name, ".api.resource.Quantity"):
		return oneOf(name, "string", "number")
	}
	return walk(d)
}

func oneOf(name string, types ...string) any {
	var alts []any
	for _, t := range types {
		alts = append(alts, map[string]any{"type": t})
	}
	return map[string]any{"description": name, "oneOf": append(alts, map[string]any{"type": "null"})}
}

// walk makes one schema strict, and the schemas it holds.
func walk(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			switch k {
			case "properties":
				props := map[string]any{}
				for p, s := range x.(map[string]any) {
					props[p] = walk(s)
				}
				out[k] = props
			case "items", "additionalProperties":
				out[k] = walk(x)
			case "format":
				if x == "int-or-string" {
					return oneOf("int-or-string", "string", "integer")
				}
				out[k] = x
			default:
				out[k] = x
			}
		}
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
		if _, ok := out["properties"]; ok {
			if _, set := out["additionalProperties"]; !set {
				out["additionalProperties"] = false
			}
		}
		return out
	default:
		return v
	}
}

// reachable returns the definitions name reaches through $ref, itself
// included.
func reachable(defs map[string]any, name string) map[string]any {
	got := map[string]any{}
	var visit func(string)
	visit = func(n string) {
		if _, seen := got[n]; seen {
			return
		}
		d, ok := defs[n]
		if !ok {
			return
		}
		got[n] = d
		for _, r := range refs(d, nil) {
			visit(r)
		}
	}
	visit(name)
	return got
}

// refs appends the definitions v refers to.
func refs(v any, to []string) []string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				to = append(to, strings.TrimPrefix(s, "#/definitions/"))
				continue
			}
			to = refs(x, to)
		}
	case []any:
		for _, x := range v {
			to = refs(x, to)
		}
	}
	return to
}
