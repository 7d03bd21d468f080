package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/sandgate/sandgate/gateway/api/apitest"
)

// TestMain runs the tests and, with -v, says how much of their traffic
// the OpenAPI checker validated.
func TestMain(m *testing.M) {
	code := m.Run()
	if testing.Verbose() {
		req, resp := apitest.Validated()
		fmt.Printf("openapi: %d requests and %d answers validated against the document\n", req, resp)
	}
	os.Exit(code)
}
