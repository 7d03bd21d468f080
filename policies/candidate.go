package policies

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"

	"github.com/sandgate/sandgate"
)

// CandidateSource is the source a candidate bundle's errors name.
const CandidateSource = "candidate"

// MaxCandidateFiles bounds the files of a candidate bundle.
const MaxCandidateFiles = 256

// candidateName is a file name a bundle directory can hold and readBundle
// would read: no directory, not hidden, *.rego or *.json.
var candidateName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// Candidate is a bundle loaded, compiled, tested and prepared as a reload
// would, but never put in force: a replay evaluates past decisions against
// it. It implements sandgate.PolicyCandidate and is safe for concurrent use.
type Candidate struct {
	e *Engine
	p *policy
}

var (
	_ sandgate.PolicyCandidate = (*Candidate)(nil)
	_ sandgate.CandidateLoader = (*Engine)(nil)
)

// LoadCandidate loads the bundle made of files (name to content) as a
// candidate, with the engine's clock and decision IDs. See the package
// function LoadCandidate.
//
// With verification keys pinned, a candidate follows the rule a reload
// does: its files must carry a signature (.signatures.json, and the
// .manifest it signs) by a pinned key covering each of them, or it is
// POLICY-INVALID.
//
// With an Evaluator (Options.Evaluator), the candidate is loaded, tested
// and evaluated in a child process that ends when ctx does (or when the
// candidate is closed: it is an io.Closer then); a candidate that needs
// more than the evaluator's limits is POLICY-INVALID, at load or at any
// Decide, with the limit in Details["limit"].
func (e *Engine) LoadCandidate(ctx context.Context, files map[string][]byte) (sandgate.PolicyCandidate, error) {
	list, sig, err := candidateFiles(files, e.keys)
	if err != nil {
		return nil, err
	}
	if e.eval != nil {
		return e.eval.loadCandidate(ctx, list, e)
	}
	b, err := parseBundle(CandidateSource, list)
	if err != nil {
		return nil, invalid(CandidateSource, err)
	}
	b.signature = sig
	c, err := newCandidate(ctx, CandidateSource, b)
	if err != nil {
		return nil, err
	}
	c.e.clock, c.e.ids = e.clock, e.ids
	return c, nil
}

// LoadCandidate loads the bundle made of files (file name to content, the
// top of a bundle directory: *.rego, *_test.rego and *.json files) as a
// candidate, in this process. A bad file name or too many files is
// INVALID-REQUEST naming "files"; a bundle the engine would refuse (it
// does not compile, has a rule without METADATA, defines no decision, or
// fails its own tests) is POLICY-INVALID with every problem in
// Details["errors"]. A signature (.signatures.json) and manifest
// (.manifest) among files are ignored: Engine.LoadCandidate verifies them
// when keys are pinned.
func LoadCandidate(ctx context.Context, files map[string][]byte) (*Candidate, error) {
	list, _, err := candidateFiles(files, nil)
	if err != nil {
		return nil, err
	}
	b, err := parseBundle(CandidateSource, list)
	if err != nil {
		return nil, invalid(CandidateSource, err)
	}
	return newCandidate(ctx, CandidateSource, b)
}

// candidateFiles checks the names and the number of a candidate's files,
// and with keys verifies its signature: the files of the bundle, and who
// signed them (nil without keys).
func candidateFiles(files map[string][]byte, keys *VerifyKeys) ([]bundleFile, *Signature, error) {
	if len(files) == 0 {
		return nil, nil, sandgate.FieldError("files", "a candidate bundle needs at least one file")
	}
	if len(files) > MaxCandidateFiles {
		return nil, nil, sandgate.FieldError("files", "a candidate bundle has at most %d files, not %d", MaxCandidateFiles, len(files))
	}
	list := make([]bundleFile, 0, len(files))
	var signed signedFiles
	for name, data := range files {
		switch name {
		case SignaturesFile:
			signed.signatures = slices.Clone(data)
			continue
		case ManifestFile:
			signed.manifest = slices.Clone(data)
			continue
		}
		if ext := path.Ext(name); !candidateName.MatchString(name) || (ext != ".rego" && ext != ".json") {
			return nil, nil, sandgate.FieldError("files", "%q is not a bundle file name: a *.rego or *.json name without a directory, of at most 128 letters, digits, '.', '_' and '-'", shortName(name))
		}
		list = append(list, bundleFile{name: name, data: slices.Clone(data)})
	}
	if keys == nil {
		return list, nil, nil
	}
	s, err := keys.verify(list, signed)
	if err != nil {
		return nil, nil, invalid(CandidateSource, &loadError{[]string{err.Error()}})
	}
	return list, &s, nil
}

// newCandidate compiles, tests and prepares b, read from source, as a
// candidate with no settings of its own.
func newCandidate(ctx context.Context, source string, b *bundle) (*Candidate, error) {
	e := &Engine{source: source}
	for i, airGapped := range []bool{false, true} {
		e.settingsTerms[i] = settingsTerm(sandgate.Settings{AirGapped: airGapped, MountRoots: []string{}})
	}
	p, err := e.prepare(ctx, b, true)
	if err != nil {
		return nil, invalid(source, err)
	}
	e.current.Store(p)
	return &Candidate{e: e, p: p}, nil
}

// BundleFiles reads the files of the bundle in dir ("" for the embedded
// one) as the engine would load them: the *.rego and *.json files at the
// top of the directory, hidden files and subdirectories left out, and its
// signature and manifest when it has them, so that a gateway that pins
// keys can verify the candidate. A directory that cannot be read is a
// POLICY-INVALID error.
func BundleFiles(dir string) (map[string][]byte, error) {
	files, source, err := readBundleFiles(dir)
	if err != nil {
		return nil, invalid(source, err)
	}
	out := make(map[string][]byte, len(files)+2)
	for _, f := range files {
		out[f.name] = f.data
	}
	if dir != "" {
		fsys, _ := bundleFS(dir)
		signed, err := readSignedFiles(fsys)
		if err != nil {
			return nil, invalid(source, &loadError{[]string{err.Error()}})
		}
		if signed.signatures != nil {
			out[SignaturesFile] = signed.signatures
		}
		if signed.manifest != nil {
			out[ManifestFile] = signed.manifest
		}
	}
	return out, nil
}

// Revision is the candidate's revision: the one the engine would report
// after loading the same files.
func (c *Candidate) Revision() string { return c.p.revision }

// Mask lists the spec fields the candidate's data.sandgate.config.mask
// names.
func (c *Candidate) Mask() []string { return slices.Clone(c.p.mask) }

// Modules are the candidate's files with their SHA-256.
func (c *Candidate) Modules() []sandgate.PolicyModule { return slices.Clone(c.p.modules) }

// Decide evaluates in against the candidate as Engine.Decide does; the
// candidate has no settings of its own, so in.Settings are what the
// policy sees.
func (c *Candidate) Decide(ctx context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	return c.e.Decide(ctx, in)
}

func shortName(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%s…", s[:64])
	}
	return s
}
