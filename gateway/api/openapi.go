package api

import (
	"bytes"
	_ "embed"
)

// openAPI is the document; see OpenAPI.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the API, as GET
// /v1/openapi.json serves it: every route with its parameters, bodies,
// answers and error codes. The gateway's tests hold its answers to it.
func OpenAPI() []byte { return bytes.Clone(openAPI) }
