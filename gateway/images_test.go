package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// fakePackages is an ImagePackageLister of fixed images, by reference.
type fakePackages struct {
	images map[string]sandgate.ImagePackages
	asked  []string
}

func (f *fakePackages) ImagePackages(_ context.Context, ref string) (sandgate.ImagePackages, error) {
	f.asked = append(f.asked, ref)
	if p, ok := f.images[ref]; ok {
		return p, nil
	}
	return sandgate.ImagePackages{}, &sandgate.Error{Code: sandgate.CodeNotFound, Field: "ref", Message: "no image " + ref}
}

// TestImagePackagesRoute checks GET /v1/images/{ref}/packages: a listed
// image by name:tag (slash percent-encoded) and by ID, one with no list,
// an unknown one (404 naming ref), the roles, and hostile refs, each
// refused with 400 naming ref before the daemon is asked.
func TestImagePackagesRoute(t *testing.T) {
	id := "sha256:" + strings.Repeat("ab", 32)
	py := sandgate.ImagePackages{Ref: "sandgate/python:3", ID: id, Listed: true, Digest: "sha256:" + strings.Repeat("cd", 32),
		Packages: []sandgate.Package{{Name: "python3", Version: "3.11.2-1+b1", Architecture: "amd64", Source: "python3-defaults", SourceVersion: "3.11.2-1"}}}
	byID := py
	byID.Ref = id
	bare := sandgate.ImagePackages{Ref: "busybox:latest", ID: "sha256:" + strings.Repeat("ef", 32), Reason: "not built by sandgate", Packages: []sandgate.Package{}}
	fake := &fakePackages{images: map[string]sandgate.ImagePackages{"sandgate/python:3": py, id: byID, "busybox:latest": bare}}
	e := newEnv(t, func(_ *Config, e *testEnv) { e.imagePackages = fake })

	for _, tc := range []struct {
		name, path, tok string
		status          int
		want            *sandgate.ImagePackages
		code            sandgate.ErrorCode
	}{
		{"by name", "/v1/images/sandgate%2Fpython:3/packages", tokAuditor, 200, &py, ""},
		{"by ID", "/v1/images/" + id + "/packages", tokAdmin, 200, &byID, ""},
		{"no list", "/v1/images/busybox:latest/packages", tokAuditor, 200, &bare, ""},
		{"unknown", "/v1/images/sandgate%2Fnope:1/packages", tokAuditor, 404, nil, sandgate.CodeNotFound},
		{"submitter", "/v1/images/sandgate%2Fpython:3/packages", tokBob, 403, nil, sandgate.CodeForbidden},
		{"dot dot", "/v1/images/sandgate%2F..%2F..%2Fetc:1/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"dot dot encoded twice", "/v1/images/a%252F..%252Fb/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"too long", "/v1/images/" + strings.Repeat("a", sandgate.MaxNameBytes+1) + "/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"digest not hex", "/v1/images/sandgate%2Fpython@sha256:" + strings.Repeat("zz", 32) + "/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"ID not hex", "/v1/images/sha256:" + strings.Repeat("zz", 32) + "/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"ID short", "/v1/images/sha256:abcd/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
		{"upper case", "/v1/images/Sandgate%2FPython:3/packages", tokAuditor, 400, nil, sandgate.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := len(fake.asked)
			r := e.do(http.MethodGet, tc.path, tc.tok, "")
			if r.status != tc.status {
				t.Fatalf("GET %s: %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
			if tc.want != nil {
				var got api.ImagePackagesView
				if err := json.Unmarshal(r.body, &got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(*tc.want, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
				return
			}
			var body struct {
				Error struct {
					Code    sandgate.ErrorCode `json:"code"`
					Details struct {
						Field string `json:"field"`
					} `json:"details"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code != tc.code {
				t.Fatalf("GET %s: %s, want code %s", tc.path, r.body, tc.code)
			}
			if tc.status == 400 || tc.status == 404 {
				if body.Error.Details.Field != "ref" {
					t.Errorf("field %q, want ref: %s", body.Error.Details.Field, r.body)
				}
			}
			if tc.status == 400 && len(fake.asked) != asked {
				t.Errorf("the daemon was asked for %q", fake.asked[len(fake.asked)-1])
			}
		})
	}
}
