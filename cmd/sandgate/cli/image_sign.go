package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/imagesig"
)

// newImageSignCmd builds `sandgate image sign IMAGE --key KEY`: a detached
// signature, in cosign's sign-blob format, over the image's ID.
func newImageSignCmd(a *app) *cobra.Command {
	var key, out, passwordEnv string
	cmd := &cobra.Command{
		Use:   "sign IMAGE --key KEY.pem [--out PREFIX]",
		Short: "Sign an image offline (PREFIX.payload and PREFIX.sig, cosign's sign-blob format)",
		Long: `Sign IMAGE, as the daemon has it: PREFIX.payload is a small JSON document naming
the image's ID (the digest of its configuration, which names every layer) and
the name it is signed as; PREFIX.sig is the base64 signature over it, as
'cosign sign-blob --key KEY' writes it. KEY is a PEM private key (ECDSA, RSA or
Ed25519; cosign's encrypted keys are opened with the password in the variable
--password-env names, COSIGN_PASSWORD by default). Verify with
'cosign verify-blob --key KEY.pub --signature PREFIX.sig PREFIX.payload', and
load with 'sandgate image load FILE --signature PREFIX'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return &ExitError{Code: exitUsage, Message: "--key is required"}
			}
			pem, err := os.ReadFile(key)
			if err != nil {
				return err
			}
			im, err := a.imageAdmin()
			if err != nil {
				return err
			}
			defer im.Close()
			id, err := im.ImageID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			signed, err := imagesig.Sign(imagesig.Payload{ImageID: id, Ref: args[0]}, pem, []byte(a.getenv(passwordEnv)))
			if err != nil {
				return err
			}
			if out == "" {
				out = "image-" + shortID(id)
			}
			if err := os.WriteFile(out+".payload", signed.Payload, 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(out+".sig", []byte(signed.Signature+"\n"), 0o644); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "signed %s (%s): %s.payload %s.sig\n", args[0], id, out, out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "PEM private key to sign with")
	f.StringVar(&out, "out", "", "prefix of the files written (default image-<short ID>)")
	f.StringVar(&passwordEnv, "password-env", "COSIGN_PASSWORD", "variable holding an encrypted key's password")
	return cmd
}

// storeSignature checks the signature PREFIX.payload/PREFIX.sig against
// the images just loaded and keeps it for the one it signs.
func (a *app) storeSignature(cmd *cobra.Command, im *images.Images, prefix string, loaded []string) error {
	signed, err := imagesig.ReadSigned(prefix+".payload", prefix+".sig")
	if err != nil {
		return err
	}
	var p imagesig.Payload
	keys, err := a.cfg.imageKeys()
	if err != nil {
		return err
	}
	signer := "(not verified here: SANDGATE_IMAGE_VERIFY_KEYS is not set)"
	if keys != nil {
		if p, signer, err = keys.Verify(signed); err != nil {
			return fmt.Errorf("the signature %s.sig is refused: %w", prefix, err)
		}
	} else if p, err = imagesig.PayloadOf(signed); err != nil {
		return err
	}
	for _, ref := range loaded {
		id, err := im.ImageID(cmd.Context(), ref)
		if err != nil {
			return err
		}
		if id == p.ImageID {
			if err := (imagesig.Store{Dir: a.cfg.ImageSignatureDir}).Put(id, signed, p); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "signature of %s (%s) by %s kept\n", ref, id, signer)
			return err
		}
	}
	return fmt.Errorf("the signature %s.sig is of image %s, which the tarball does not hold", prefix, p.ImageID)
}
