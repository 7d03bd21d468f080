package gateway

import (
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
)

// A request may say which surface it came through and which client made
// it: sandgate's MCP server (`sandgate mcp` and /v1/mcp) says
// X-Sandgate-Via: mcp and X-Sandgate-Client: the MCP client's name and
// version from initialize. They are what the caller says, recorded beside
// the principal its token proved, never a credential: malformed ones are
// dropped, not refused.
const (
	headerVia    = "X-Sandgate-Via"
	headerClient = "X-Sandgate-Client"
)

var (
	viaPattern    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,15}$`)
	clientPattern = regexp.MustCompile(`^[\x21-\x7e][\x20-\x7e]{0,127}$`)
)

// viaOf is the request's surface and client, as far as they are well
// formed: the client header is "name/version", the name at most 128
// printable ASCII characters, the version too.
func viaOf(c echo.Context) (string, *sandgate.ClientInfo) {
	h := c.Request().Header
	via := h.Get(headerVia)
	if !viaPattern.MatchString(via) {
		return "", nil
	}
	name, version, _ := strings.Cut(h.Get(headerClient), "/")
	if !clientPattern.MatchString(name) {
		return via, nil
	}
	if version != "" && !clientPattern.MatchString(version) {
		version = ""
	}
	return via, &sandgate.ClientInfo{Name: name, Version: version}
}
