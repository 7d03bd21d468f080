package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/distribution/reference"
	"sigs.k8s.io/yaml"
)

// Recipe is one language image `sandgate image build NAME` makes from
// Debian packages: a YAML file of deploy/images (embedded in the binary).
// docs/workspaces.md ("Language images") documents each field.
type Recipe struct {
	// Name is what `sandgate image build NAME` takes; the file is NAME.yaml.
	Name string `json:"name"`
	// Image is the reference the image is tagged with ("sandgate/python:3").
	Image string `json:"image"`
	// Description is one line for `sandgate image build --list`.
	Description string `json:"description"`
	// Suite is the Debian release the packages come from ("bookworm").
	Suite string `json:"suite"`
	// Packages are the Debian packages to install; their dependencies
	// come along (not their recommends).
	Packages []string `json:"packages"`
	// SourceDateEpoch is the default SOURCE_DATE_EPOCH: the image's
	// creation time, and no file is newer. The environment's
	// SOURCE_DATE_EPOCH overrides it.
	SourceDateEpoch int64 `json:"source_date_epoch"`
	// Env is added to the image's environment (PATH and HOME are set).
	Env map[string]string `json:"env"`
	// Exclude are paths (relative, path.Match globs, a directory takes
	// what is below it) dropped on top of the paths every image drops:
	// documentation, the package manager and its state, shells.
	Exclude []string `json:"exclude"`
	// Shell keeps the POSIX shell (/bin/sh and what it links to), which
	// every other image drops: an image for agents needs it for make's
	// recipes, git's hooks and commands chained with &&.
	Shell bool `json:"shell"`
	// Checks are run in a container of the new image, as the sandbox
	// user with the run path's hardening; a check that fails fails the
	// build and removes the image.
	Checks []RecipeCheck `json:"checks"`

	// Digest is the SHA-256 of the recipe file and of the builder's
	// version: the image's sandgate.recipe.sha256 label, which says
	// whether an existing image was built from this recipe.
	Digest string `json:"-"`
}

// RecipeCheck is a command the built image must run successfully.
type RecipeCheck struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	// Expect, when set, must be a substring of the command's stdout.
	Expect string `json:"expect"`
}

// recipeBuilderVersion changes when the way recipes become images does
// (the excluded paths, the added files, the labels; 2: the package list
// with architecture and source, and dpkg's status file), so that images
// built by an older builder are not taken as current.
const recipeBuilderVersion = "sandgate-recipe/2"

var (
	recipeName  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)
	debianName  = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,99}$`)
	debianSuite = regexp.MustCompile(`^[a-z][a-z0-9-]{1,39}$`)
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// ParseRecipe decodes and checks one recipe file, strictly: an unknown
// field is an error.
func ParseRecipe(file string, data []byte) (Recipe, error) {
	var r Recipe
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return Recipe{}, fmt.Errorf("recipe %s: %w", file, err)
	}
	if err := r.validate(); err != nil {
		return Recipe{}, fmt.Errorf("recipe %s: %w", file, err)
	}
	if want := strings.TrimSuffix(path.Base(file), ".yaml"); want != r.Name {
		return Recipe{}, fmt.Errorf("recipe %s: name %q, but the file is named for %q", file, r.Name, want)
	}
	sum := sha256.New()
	sum.Write([]byte(recipeBuilderVersion + "\n"))
	sum.Write(data)
	r.Digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	return r, nil
}

func (r *Recipe) validate() error {
	if !recipeName.MatchString(r.Name) {
		return fmt.Errorf("name %q: lower-case letters, digits and -, at most 40", r.Name)
	}
	named, err := reference.ParseNormalizedNamed(r.Image)
	if err != nil {
		return fmt.Errorf("image %q: %w", r.Image, err)
	}
	if _, ok := named.(reference.NamedTagged); !ok {
		return fmt.Errorf("image %q: name a tag (%s:1)", r.Image, r.Image)
	}
	if _, ok := named.(reference.Digested); ok {
		return fmt.Errorf("image %q: a built image has no registry digest to name", r.Image)
	}
	if !debianSuite.MatchString(r.Suite) {
		return fmt.Errorf("suite %q is not a Debian suite name", r.Suite)
	}
	if len(r.Packages) == 0 {
		return fmt.Errorf("packages: name at least one Debian package")
	}
	for _, p := range r.Packages {
		if !debianName.MatchString(p) {
			return fmt.Errorf("packages: %q is not a Debian package name", p)
		}
	}
	if r.SourceDateEpoch <= 0 {
		return fmt.Errorf("source_date_epoch: a positive Unix time is required")
	}
	for k := range r.Env {
		if !envName.MatchString(k) || k == "PATH" || k == "HOME" {
			return fmt.Errorf("env: %q is not a name the recipe may set", k)
		}
	}
	for _, x := range r.Exclude {
		if x == "" || path.IsAbs(x) || path.Clean(x) != x || strings.HasPrefix(x, "..") {
			return fmt.Errorf("exclude: %q must be a clean relative path", x)
		}
		if _, err := path.Match(x, ""); err != nil {
			return fmt.Errorf("exclude: %q: %w", x, err)
		}
	}
	for i, c := range r.Checks {
		if len(c.Command) == 0 || c.Command[0] == "" {
			return fmt.Errorf("checks[%d]: command is empty", i)
		}
	}
	return nil
}

// LoadRecipes reads every NAME.yaml of fsys (deploy/images.Recipes), by
// name.
func LoadRecipes(fsys fs.FS) ([]Recipe, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]Recipe, 0, len(files))
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		r, err := ParseRecipe(f, data)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// FindRecipe returns the recipe called name, or an error listing those
// there are.
func FindRecipe(recipes []Recipe, name string) (Recipe, error) {
	names := make([]string, 0, len(recipes))
	for _, r := range recipes {
		if r.Name == name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return Recipe{}, fmt.Errorf("no image recipe %q (there are: %s)", name, strings.Join(names, ", "))
}
