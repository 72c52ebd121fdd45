package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/spell"
)

// group is one kind of settings block of the configuration (a struct
// type): its keys, and the paths where such a block goes.
type group struct {
	keys  []string
	paths []string
}

// groups maps each kind of block, named as the YAML decoder names its
// type ("config.Log", "policy.Hook"), to its keys and paths.
var groups = sync.OnceValue(func() map[string]*group {
	m := map[string]*group{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Map:
			walk(t.Elem(), path+"[]")
			return
		case t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Duration]() || strings.Count(path, ".") > 8:
			return
		}
		g := m[t.String()]
		if g == nil {
			g = &group{}
			m[t.String()] = g
		}
		g.paths = append(g.paths, path)
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "-" || tag == "" || !f.IsExported() {
				continue
			}
			if !slices.Contains(g.keys, tag) {
				g.keys = append(g.keys, tag)
			}
			walk(f.Type, strings.TrimPrefix(path+"."+tag, "."))
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return m
})

// unknownHint says what an unknown key of a block of kind typeName may
// have been meant as: a key of that block within two edits ("did you
// mean"), or a key of another kind of block (where it belongs).
func unknownHint(typeName, key string) string {
	all := groups()
	g := all[typeName]
	if g == nil {
		return ""
	}
	if near := spell.Nearest(key, g.keys, min(2, len(key)/3)); near != "" {
		return fmt.Sprintf(": did you mean %q?", near)
	}
	var where []string
	for name, other := range all {
		if name != typeName && slices.Contains(other.keys, key) {
			where = append(where, placeOf(name, other, key))
		}
	}
	if len(where) == 0 {
		return ""
	}
	slices.Sort(where)
	return fmt.Sprintf(": it is a setting of %s", strings.Join(where, ", or of "))
}

// nouns name the kinds of block that recur, for a hint.
var nouns = map[string]string{"policy.Hook": "a hook", "policy.HTTPHook": "a webhook (a hook's http)", "policy.Rule": "a rule"}

// placeOf names where key goes in blocks of kind typeName: one path (a
// rule's, where there is one), and the other places by their last name.
func placeOf(typeName string, g *group, key string) string {
	i := max(0, slices.IndexFunc(g.paths, func(p string) bool { return strings.Contains(p, "rules[]") }))
	p := strings.TrimPrefix(g.paths[i]+"."+key, ".")
	if n := nouns[typeName]; n != "" {
		p = n + ": " + p
	}
	if others := lastParts(g.paths, g.paths[i]); others != "" {
		p += " (also under " + others + ")"
	}
	return p
}

// lastParts lists the last names of paths other than skip's, without
// repeats, for a short "on_timeout, on_late_result" rather than whole paths.
func lastParts(paths []string, skip string) string {
	own := skip[strings.LastIndex(skip, ".")+1:]
	var names []string
	for _, p := range paths {
		n := p[strings.LastIndex(p, ".")+1:]
		if n != own && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// Unreloaded lists the settings, as dotted keys, in which b differs from
// a outside what a reload puts in force (the policy): those are read once,
// at start, and take effect only when the proxy starts again.
func Unreloaded(a, b Config) []string {
	var out []string
	t := reflect.TypeFor[Config]()
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || tag == "policy" {
			continue
		}
		out = append(out, changed(va.Field(i), vb.Field(i), tag)...)
	}
	return out
}

// changed lists the dotted keys under path in which a and b differ.
func changed(a, b reflect.Value, path string) []string {
	if a.Kind() != reflect.Struct || a.Type() == reflect.TypeFor[time.Duration]() {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return nil
		}
		return []string{path}
	}
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		out = append(out, changed(a.Field(i), b.Field(i), path+"."+tag)...)
	}
	return out
}
