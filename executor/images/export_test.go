package images

import "context"

// RunCheck runs one check in a container of image id, as BuildRecipeImage
// runs a recipe's checks.
func (im *Images) RunCheck(ctx context.Context, id string, c RecipeCheck) error {
	return im.runCheck(ctx, id, c)
}
