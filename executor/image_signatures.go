package executor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"

	"github.com/sandgate/sandgate"
)

// signer checks the image id that ref resolved to against the
// signers the run's policy requires for ref's repository (required, from
// data image_signers), and returns the pinned key that signed it ("" when
// unsigned). refused is the reason the run may not use the image: the
// policy names signers for the repository and the image is unsigned, its
// signature does not verify or signs another image (a tag moved to
// another image keeps no signature: signatures are by image ID), or it
// was signed by a key the policy does not name.
func (rs *resolver) signer(ref, id string, required map[string][]string) (signer, refused string) {
	var verr error
	if rs.keys != nil && rs.signatures.Dir != "" {
		signer, verr = rs.signatures.Signer(id, rs.keys)
	}
	keys := required[repositoryOf(ref)]
	if len(keys) == 0 {
		return signer, ""
	}
	why := "it is not signed"
	switch {
	case verr != nil:
		why = "its signature is refused: " + verr.Error()
	case signer != "" && slices.Contains(keys, signer):
		return signer, ""
	case signer != "":
		why = "it is signed by " + signer
	case rs.keys == nil:
		why = "this gateway has no image verification keys (SANDGATE_IMAGE_VERIFY_KEYS)"
	}
	return signer, fmt.Sprintf("image_signature: %s (%s) must be signed by %s (data.sandgate.config.image_signers), and %s",
		ref, shortImageID(id), strings.Join(keys, " or "), why)
}

// repositoryOf is ref's repository as the policy's data names it: the
// familiar name without tag or digest ("sandgate/python").
func repositoryOf(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.FamiliarName(named)
}

func shortImageID(id string) string {
	if len(id) > 19 {
		return id[:19]
	}
	return id
}

// signatureRequired reports whether the job's policy names signers for
// ref's repository.
func signatureRequired(job sandgate.Job, ref string) bool {
	return len(job.Enforcement.ImageSigners[repositoryOf(ref)]) > 0
}
