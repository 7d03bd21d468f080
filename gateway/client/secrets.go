package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// PutSecret sets value as the secret name's next version (security,
// admin) and returns what is stored, never the value.
func (c *Client) PutSecret(ctx context.Context, name, value string) (sandgate.SecretInfo, error) {
	body, err := json.Marshal(api.SecretPut{Value: &value})
	if err != nil {
		return sandgate.SecretInfo{}, fmt.Errorf("encode secret: %w", err)
	}
	var info sandgate.SecretInfo
	err = c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), nil, nil, bytes.NewReader(body), &info)
	return info, err
}

// Secrets lists the stored secrets without their values (security,
// admin).
func (c *Client) Secrets(ctx context.Context) (api.SecretList, error) {
	var list api.SecretList
	err := c.do(ctx, http.MethodGet, "/v1/secrets", nil, nil, nil, &list)
	return list, err
}

// DeleteSecret removes the secret name's value (security, admin).
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, nil, nil)
}
