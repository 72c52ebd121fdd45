package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
)

// foreignFlags are the other tools' flags the docs name in a code span of
// their own, with the tool they belong to.
var foreignFlags = map[string]string{
	"--omit":         "npm",
	"--transport":    "mcp-remote",
	"--spec-version": "the conformance suite",
	"--set":          "helm",
	"--update":       "scripts/check-chart",
}

// TestDocs: every page of the documentation links only to files and
// headings that exist, names only flags the proxy (or a subcommand) has,
// and only configuration keys it accepts. A renamed flag, key, page or
// heading fails here until the docs follow.
func TestDocs(t *testing.T) {
	t.Parallel()
	pages := docPages(t)
	flags := knownFlags(t)
	for _, p := range pages {
		text := readDoc(t, p)
		for _, bad := range deadLinks(p, text) {
			t.Errorf("%s: dead link %s", p, bad)
		}
		for _, f := range docFlags(text) {
			if !flags[f] && foreignFlags[f] == "" {
				t.Errorf("%s: flag %s: no such flag of mcp-cancel-proxy or its subcommands", p, f)
			}
		}
		for _, k := range docKeys(text) {
			if !knownKey(k) {
				t.Errorf("%s: configuration key %s: no such key", p, k)
			}
		}
	}
}

// TestDocsCheckCatches: the checks find what they are for, so that
// TestDocs cannot pass by finding nothing.
func TestDocsCheckCatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	page := filepath.Join(dir, "p.md")
	text := "# Title\n\n## A section\n\n[ok](#a-section) [gone](#no-such) [missing](nowhere.md) [web](https://example.com)\n" +
		"`--listen 127.0.0.1:8080`, `mcp-cancel-proxy --no-such-flag -- srv --not-ours`\n" +
		"`http.listen`, `http.no_such_key: 1`, `policy.rules[].on_cancel.exec`, `policy.rules[].nope`\n" +
		"```json\n{\"command\": \"mcp-cancel-proxy\", \"args\": [\"--log-levl\", \"debug\", \"--\", \"srv\", \"--x\"]}\n```\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := deadLinks(page, text), []string{"#no-such", "nowhere.md"}; !slices.Equal(got, want) {
		t.Errorf("dead links %q, want %q", got, want)
	}
	if got, want := docFlags(text), []string{"--listen", "--no-such-flag", "--log-levl"}; !slices.Equal(got, want) {
		t.Errorf("flags %q, want %q", got, want)
	}
	var unknown []string
	for _, k := range docKeys(text) {
		if !knownKey(k) {
			unknown = append(unknown, k)
		}
	}
	if want := []string{"http.no_such_key", "policy.rules[].nope"}; !slices.Equal(unknown, want) {
		t.Errorf("unknown keys %q, want %q", unknown, want)
	}
}

// docPages lists the documentation: the README, CONTRIBUTING, the
// changelog and every page under docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	for _, p := range []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"} {
		pages = append(pages, filepath.Join(root, p))
	}
	return pages
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	linkRE    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	spanRE    = regexp.MustCompile("`([^`\n]+)`")
	flagRE    = regexp.MustCompile(`^--[a-z][a-z0-9-]*`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// deadLinks returns the relative links of a page (at path) whose file or
// heading does not exist.
func deadLinks(path, text string) []string {
	var dead []string
	for _, m := range linkRE.FindAllStringSubmatch(prose(text), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			if _, err := os.Stat(dest); err != nil {
				dead = append(dead, target)
				continue
			}
		}
		if anchor != "" && !hasHeading(dest, anchor) {
			dead = append(dead, target)
		}
	}
	return dead
}

// hasHeading reports whether the Markdown file has a heading whose
// GitHub anchor is anchor.
func hasHeading(path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, m := range headingRE.FindAllStringSubmatch(prose(string(b)), -1) {
		if slug(m[1]) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's anchor for a heading: lower case, punctuation
// dropped, spaces made hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// prose is the text outside fenced code blocks (each block's lines made
// empty).
func prose(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// codeBlocks returns the fenced code blocks, each with its language.
func codeBlocks(text string) (blocks []struct{ lang, body string }) {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		j := i + 1
		for j < len(lines) && !strings.HasPrefix(lines[j], "```") {
			j++
		}
		blocks = append(blocks, struct{ lang, body string }{lang, strings.Join(lines[i+1:min(j, len(lines))], "\n")})
		i = j
	}
	return blocks
}

// docFlags returns the flags a page gives the proxy: a code span that is
// a flag, and in code spans, shell blocks and JSON client configurations
// every --flag after a word naming mcp-cancel-proxy up to the server
// command's "--".
func docFlags(text string) []string {
	var flags []string
	add := func(words []string) {
		for i, w := range words {
			if !strings.HasSuffix(w, "mcp-cancel-proxy") && !strings.HasSuffix(w, "mcp-cancel-proxy.exe") {
				continue
			}
			for _, f := range words[i+1:] {
				if f == "--" || f == "|" || f == "&&" || f == "#" || f == ";" {
					break
				}
				if m := flagRE.FindString(f); m != "" {
					flags = append(flags, m)
				}
			}
			return
		}
	}
	for _, m := range spanRE.FindAllStringSubmatch(prose(text), -1) {
		if f := flagRE.FindString(m[1]); f != "" {
			flags = append(flags, f)
			continue
		}
		add(strings.Fields(m[1]))
	}
	for _, b := range codeBlocks(text) {
		switch b.lang {
		case "json":
			var v any
			if json.Unmarshal([]byte(b.body), &v) == nil {
				walkCommands(v, add)
			}
		case "sh", "bash", "":
			for _, l := range strings.Split(b.body, "\n") {
				add(strings.Fields(l))
			}
		}
	}
	return flags
}

// walkCommands calls f with the words of every {"command", "args"} object
// in a JSON document.
func walkCommands(v any, f func([]string)) {
	switch v := v.(type) {
	case map[string]any:
		if cmd, ok := v["command"].(string); ok {
			words := []string{cmd}
			args, _ := v["args"].([]any)
			for _, a := range args {
				s, _ := a.(string)
				words = append(words, s)
			}
			f(words)
		}
		for _, e := range v {
			walkCommands(e, f)
		}
	case []any:
		for _, e := range v {
			walkCommands(e, f)
		}
	}
}

// knownFlags are the flags in the usage of the proxy and of each
// subcommand, as --help prints them.
func knownFlags(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"--help": true, "--version": true}
	for _, args := range [][]string{{"--help"}, {"validate", "--help"}, {"hooks", "list", "--help"},
		{"hooks", "retry", "--help"}, {"hooks", "drop", "--help"}, {"demo", "--help"}, {"example-server", "--help"}, {"check", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		for _, f := range regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(stdout.String(), -1) {
			known[f] = true
		}
	}
	return known
}

// docKeys returns the configuration keys a page names in code spans: a
// dotted name under one of the configuration's sections (`http.listen`,
// `policy.rules[].tool`, `audit.path: off`).
func docKeys(text string) []string {
	var sections []string
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if tag, _, _ := strings.Cut(ct.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			sections = append(sections, tag)
		}
	}
	re := regexp.MustCompile(`^(?:` + strings.Join(sections, "|") + `)(?:\.[a-z0-9_]+(?:\[\])?)+`)
	var keys []string
	for _, m := range spanRE.FindAllStringSubmatch(prose(text), -1) {
		k := re.FindString(m[1])
		if k == "" || len(k) < len(m[1]) && !strings.ContainsAny(m[1][len(k):len(k)+1], ": =,") {
			continue // a file name such as audit.jsonl, or not a key
		}
		keys = append(keys, k)
	}
	return keys
}

// knownKey reports whether the configuration accepts a dotted key, with
// [] for an element of a list.
func knownKey(key string) bool {
	var b strings.Builder
	indent, dash := "", false
	parts := strings.Split(key, ".")
	for i, part := range parts {
		name, list := strings.CutSuffix(part, "[]")
		b.WriteString(indent)
		if dash { // the first key of a list's element
			b.WriteString("- ")
			indent += "  "
		}
		b.WriteString(name + ":")
		if i == len(parts)-1 {
			b.WriteString(" ~")
		}
		b.WriteString("\n")
		indent += "  "
		dash = list
	}
	dec := yaml.NewDecoder(strings.NewReader(b.String()))
	dec.KnownFields(true)
	var c config.Config
	err := dec.Decode(&c)
	return err == nil || !strings.Contains(err.Error(), "not found in type")
}

// TestEveryKeyShown: every setting the configuration accepts is shown in
// config.example.yaml (live, or in a commented-out example) and in the
// docs (a code span, or a YAML example); a setting of a block that recurs
// (a rule, a hook) counts once. The example itself is valid.
func TestEveryKeyShown(t *testing.T) {
	t.Parallel()
	example := readDoc(t, filepath.Join("..", "..", "config.example.yaml"))
	if _, err := config.Load(filepath.Join("..", "..", "config.example.yaml")); err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	var spans, yamlBlocks strings.Builder
	for _, p := range docPages(t) {
		text := readDoc(t, p)
		for _, m := range spanRE.FindAllStringSubmatch(prose(text), -1) {
			spans.WriteString("`" + m[1] + "`\n")
		}
		for _, b := range codeBlocks(text) {
			if b.lang == "yaml" {
				yamlBlocks.WriteString(b.body + "\n")
			}
		}
	}
	for _, s := range settingsOf(reflect.TypeFor[config.Config](), "", map[string]bool{}) {
		shown := regexp.MustCompile(`(?m)(^|[\s{,#])` + s.key + `:`)
		if !shown.MatchString(example) {
			t.Errorf("config.example.yaml does not show %s", s.path)
		}
		if !strings.Contains(spans.String(), "`"+s.path) && !strings.Contains(spans.String(), "`"+s.key+"`") &&
			!strings.Contains(spans.String(), "`"+s.key+":") && !shown.MatchString(yamlBlocks.String()) {
			t.Errorf("no page of the docs shows %s", s.path)
		}
	}
}

// setting is one key of the configuration, at the first path it has.
type setting struct{ key, path string }

// settingsOf lists the keys under t (at path), each block type's once.
func settingsOf(t reflect.Type, path string, seen map[string]bool) []setting {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		return settingsOf(t.Elem(), path+"[]", seen)
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Duration]() {
		return nil
	}
	var out []setting
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || seen[t.String()+"."+tag] {
			continue
		}
		seen[t.String()+"."+tag] = true
		p := strings.TrimPrefix(path+"."+tag, ".")
		out = append(append(out, setting{tag, p}), settingsOf(t.Field(i).Type, p, seen)...)
	}
	return out
}
