// Package images holds the recipes of the language images `sandgate image
// build NAME` makes from Debian packages with mmdebstrap, one YAML file per
// image, embedded in the binary. docs/workspaces.md ("Language images")
// describes the format and how to add one.
package images

import "embed"

// Recipes are the recipe files, NAME.yaml each.
//
//go:embed *.yaml
var Recipes embed.FS
