// ModelLayout: how a model is split over the ranks, handed to every model (GPT, ViT, ...); each
// part outlives the model. By default nothing is split.
#pragma once
#include "comm/communicator.h"
#include "nn/sequence_layout.h"
#include "nn/tensor_layout.h"

namespace tessera::models {

struct ModelLayout {
  const nn::TensorLayout* tensor = &nn::TensorLayout::single();
  nn::SequenceLayout* sequence = &nn::SequenceLayout::single();
  comm::Communicator* zero3 = nullptr;  // shard the parameters over this group (ZeRO-3)
};

}  // namespace tessera::models
