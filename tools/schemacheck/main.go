// Command schemacheck validates JSON documents against a JSON schema
// (draft 4 to 2020-12), with the library the MCP registry validates
// server.json with (santhosh-tekuri/jsonschema). scripts/check-recipes
// runs it on the registry entry of docs/recipes.md against the registry's
// published schema, which the registry's module embeds.
//
//	schemacheck SCHEMA.json DOC.json...
package main

import (
	"fmt"
	"os"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: schemacheck SCHEMA.json DOC.json...")
		os.Exit(2)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // uri, date-time...: checked, as a registry would
	schema, err := c.Compile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemacheck:", err)
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[2:] {
		if err := check(schema, path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: valid against %s\n", path, schema.Location)
	}
	if failed {
		os.Exit(1)
	}
}

// check validates the document at path.
func check(schema *jsonschema.Schema, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return err
	}
	return schema.Validate(doc)
}
