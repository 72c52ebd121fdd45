//go:build tools

// Package actionlint pins actionlint (which checks the GitHub Actions
// workflow of docs/recipes.md: scripts/check-recipes) in a module of its
// own: it needs a release candidate of go.yaml.in/yaml/v4 older than the
// one Helm's dependencies select in the tools module above.
package actionlint

import _ "github.com/rhysd/actionlint/cmd/actionlint"
