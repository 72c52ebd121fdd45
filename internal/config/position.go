package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// locate turns the decoder's and the validation's errors into one error
// per problem, each naming the file, line and column.
func locate(name string, root *yaml.Node, decodeErr, validateErr error) []error {
	var out []error
	var te *yaml.TypeError
	if errors.As(decodeErr, &te) {
		for _, msg := range te.Errors {
			out = append(out, fmt.Errorf("%s:%s", name, typeErrorAt(root, msg)))
		}
	}
	for _, err := range unjoin(validateErr) {
		var p *policy.Problem
		if errors.As(err, &p) {
			if n := find(root, p.Path); n != nil {
				out = append(out, fmt.Errorf("%s:%d:%d: %s", name, n.Line, n.Column, p))
				continue
			}
		}
		out = append(out, fmt.Errorf("%s: %w", name, err))
	}
	return out
}

// unjoin flattens errors.Join trees.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []error
		for _, e := range j.Unwrap() {
			all = append(all, unjoin(e)...)
		}
		return all
	}
	return []error{err}
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)
var (
	unknownRE = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	typeRE    = regexp.MustCompile("^cannot unmarshal !!(\\w+) `([^`]*)` into (\\S+)$")
	kindRE    = regexp.MustCompile(`^cannot unmarshal !!(\w+) into (\S+)$`) // a list or mapping where it does not go
	ownRE     = regexp.MustCompile(`^column (\d+): (.*)$`)                  // from the project's own unmarshalers
)

// typeNames says in plain words what a Go type of the configuration takes.
var typeNames = map[string]string{
	"time.Duration": "a duration such as 500ms, 30s or 5m",
	"int":           "a whole number",
	"bool":          "true or false",
	"string":        "a string",
	"[]string":      "a list of strings",
}

// plainType says in plain words what a Go type of the configuration takes.
func plainType(goType string) string {
	switch want := typeNames[goType]; {
	case want != "":
		return want
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a mapping of names to values"
	}
	return "a block of settings (name: value lines)"
}

// typeErrorAt renders a decoder message "line N: ..." as
// "N:C: setting: problem" in plain words, the column and the setting taken
// from the node it names.
func typeErrorAt(root *yaml.Node, msg string) string {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return " " + msg
	}
	line, _ := strconv.Atoi(m[1])
	text, key, col := m[2], "", 0
	switch {
	case unknownRE.MatchString(text):
		u := unknownRE.FindStringSubmatch(text)
		key = u[1]
		text = "unknown setting " + strconv.Quote(key) + unknownHint(u[2], key)
	case typeRE.MatchString(text):
		t := typeRE.FindStringSubmatch(text)
		key = t[2]
		text = fmt.Sprintf("%q is not %s", t[2], plainType(t[3]))
	case kindRE.MatchString(text):
		k := kindRE.FindStringSubmatch(text)
		text = fmt.Sprintf("%s is not %s", map[string]string{"seq": "a list", "map": "a block of settings"}[k[1]], plainType(k[2]))
	case ownRE.MatchString(text):
		o := ownRE.FindStringSubmatch(text)
		col, _ = strconv.Atoi(o[1])
		text = o[2]
	}
	path := ""
	walkPath(root, "", func(n *yaml.Node, p string) {
		if n.Line == line && (col == 0 && (key == "" || n.Value == key) || n.Column == col) && path == "" {
			path, col = p, n.Column
		}
	})
	switch {
	case col == 0:
		return fmt.Sprintf("%d: %s", line, text)
	case path == "":
		return fmt.Sprintf("%d:%d: %s", line, col, text)
	}
	return fmt.Sprintf("%d:%d: %s: %s", line, col, path, text)
}

// walkPath calls f for every node under n with the dotted path of the
// setting it belongs to ("http.cancel_grace", "policy.rules[1].tool").
func walkPath(n *yaml.Node, path string, f func(*yaml.Node, string)) {
	if n == nil {
		return
	}
	f(n, path)
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			walkPath(n.Content[i], p, f)
			walkPath(n.Content[i+1], p, f)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walkPath(c, fmt.Sprintf("%s[%d]", path, i), f)
		}
	default:
		for _, c := range n.Content {
			walkPath(c, path, f)
		}
	}
}

func walk(n *yaml.Node, f func(*yaml.Node)) {
	if n == nil {
		return
	}
	f(n)
	for _, c := range n.Content {
		walk(c, f)
	}
}

// find returns the node a setting's path names ("policy.rules[2].timeout"),
// or its nearest ancestor in the file; nil when the file says nothing of it.
func find(root *yaml.Node, path string) *yaml.Node {
	if root == nil || len(root.Content) == 0 {
		return nil
	}
	n := root.Content[0]
	var found *yaml.Node
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			key = part[:i]
			idx, _ = strconv.Atoi(part[i+1 : len(part)-1])
		}
		k, v := lookup(n, key)
		if v == nil {
			return found
		}
		found, n = k, v
		if idx >= 0 {
			if v.Kind != yaml.SequenceNode || idx >= len(v.Content) {
				return found
			}
			found, n = v.Content[idx], v.Content[idx]
		}
	}
	return found
}

// lookup returns a mapping's key and value nodes for key.
func lookup(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
