// randomize_params: gives every parameter of a store random values for a gradient check (weights
// of rank >= 2 normal(w_std), layer-norm weights normal(1, 0.2), other vectors normal(0.2)), so
// that no gradient term hides behind an initial zero or one. Shared by the model gradient checks.
#pragma once
#include <string>

#include "gradcheck.h"
#include "nn/param_store.h"

namespace tessera::testing {

inline void randomize_params(nn::ParamStore& s, float w_std) {
  for (int id = 0; id < s.size(); ++id) {
    const nn::ParamSpec& spec = s.spec(id);
    Tensor l = Tensor::empty(s.logical_local_shape(id));
    const bool ln_weight = spec.global_shape.rank() == 1 && spec.name.find("ln") != std::string::npos &&
                           spec.name.ends_with(".weight");
    fill_normal(l, "randomize." + spec.name, spec.global_shape.rank() >= 2 ? w_std : 0.2f, ln_weight ? 1.0f : 0.0f);
    s.assign_logical(s.value(id), id, l);
  }
}

}  // namespace tessera::testing
