package gateway

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/distribution/reference"
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// imageRoutes serve what the node's daemon knows of its images.
type imageRoutes struct{ *web }

// imagePackages is GET /v1/images/{ref}/packages: the Debian packages an
// image carries (auditor, admin). ref is a reference (name:tag,
// name@sha256:…) or an image ID, its slashes percent-encoded.
func (s imageRoutes) imagePackages(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	// echo leaves a parameter as sent: unescaped once, here, and only
	// once, so a twice-encoded "%252F" stays a "%" the grammar refuses.
	raw, err := url.PathUnescape(c.Param("ref"))
	if err != nil {
		return sandgate.FieldError("ref", "not a percent-encoded path segment: %v", err)
	}
	ref, err := parseImageRef(raw)
	if err != nil {
		return err
	}
	if s.d.ImagePackages == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no Docker daemon to ask for images")
	}
	list, err := s.d.ImagePackages.ImagePackages(c.Request().Context(), ref)
	switch code := sandgate.ErrorCodeOf(err); {
	case err == nil:
	case code == sandgate.CodeNotFound || code == sandgate.CodeDockerUnavailable:
		return err
	default:
		return sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "the Docker daemon did not answer for image %s", ref)
	}
	return c.JSON(http.StatusOK, api.ImagePackagesView(list))
}

var (
	imageIDPattern  = regexp.MustCompile(`^(sha256:)?[a-f0-9]{64}$`)
	imageIDTemplate = regexp.MustCompile(`^sha256:|^[A-Fa-f0-9]{64}$`)
)

// parseImageRef checks a ref of the images routes: at most
// MaxNameBytes, no "..", and either an image ID (64 lower-case hex, with
// or without "sha256:") or a reference Docker's grammar accepts, whose
// digest, when it names one, is well formed. Errors are INVALID-REQUEST
// naming the field "ref".
func parseImageRef(raw string) (string, error) {
	switch {
	case raw == "":
		return "", sandgate.FieldError("ref", "name an image: name:tag, name@sha256:…, or an image ID")
	case len(raw) > sandgate.MaxNameBytes:
		return "", sandgate.FieldError("ref", "%d bytes; at most %d", len(raw), sandgate.MaxNameBytes)
	case strings.Contains(raw, ".."):
		return "", sandgate.FieldError("ref", "%q has \"..\": not an image reference", raw)
	case imageIDTemplate.MatchString(raw):
		if !imageIDPattern.MatchString(raw) {
			return "", sandgate.FieldError("ref", "%q is not an image ID: sha256: and 64 lower-case hex digits", raw)
		}
		return raw, nil
	}
	if _, err := reference.ParseNormalizedNamed(raw); err != nil {
		return "", sandgate.FieldError("ref", "%q is not an image reference: %v", raw, err)
	}
	return raw, nil
}
