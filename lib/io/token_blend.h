// Blend specifications: `--input 'a.h5:0.7,b.h5:0.3'` or `--input @blend.txt` (one `PATH WEIGHT` a
// line) names several token data sets mixed by weight. Parsing and checking only: TokenLoader's
// blend constructor does the mixing.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tessera::io {

struct BlendSource {
  std::string path;  // a file or a glob of shards (TokenDataset::open)
  double weight = 0;  // as given; the loader normalises the weights to sum to 1
};

// The sources an --input names when it is a blend, or nullopt when it is one plain data set (no
// '@', no ',' and no ':WEIGHT' suffix): that keeps today's reading. Errors name the problem: a
// weight that is not a number, negative or not finite, weights summing to zero, an empty path, a
// blend file that cannot be read or whose line N is not `PATH WEIGHT` (blank and # lines skipped).
std::optional<std::vector<BlendSource>> parse_blend(const std::string& input);

// "a.h5:0.7,b.h5:0.3": the blend as one line (logs, checkpoints).
std::string blend_text(const std::vector<BlendSource>& sources);

}  // namespace tessera::io
