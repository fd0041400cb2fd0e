// ProcessMesh: shape arithmetic and one MPI_Comm_split per axis.
#include "comm/process_mesh.h"

namespace tessera::comm {

const char* axis_name(Axis axis) {
  static const char* names[] = {"pp", "dp", "ep", "sp", "tp"};
  return names[static_cast<int>(axis)];
}

int MeshShape::size(Axis a) const {
  switch (a) {
    case Axis::pp: return pp;
    case Axis::dp: return dp;
    case Axis::ep: return ep;
    case Axis::sp: return sp;
    case Axis::tp: return tp;
  }
  return 1;
}

std::string MeshShape::str() const {
  return "pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) + " ep=" + std::to_string(ep) +
         " sp=" + std::to_string(sp) + " tp=" + std::to_string(tp);
}

MeshShape MeshShape::resolved(int world_size) const {
  TESSERA_CHECK(pp >= 1 && ep >= 1 && sp >= 1 && tp >= 1 && dp >= 0,
                "mesh sizes must be positive: --pp ", pp, " --dp ", dp, " --ep ", ep, " --sp ", sp, " --tp ", tp);
  MeshShape s = *this;
  const int model = pp * ep * sp * tp;
  if (s.dp == 0) {
    TESSERA_CHECK(world_size % model == 0, "the layout does not fit ", world_size, " ranks: --pp ", pp, " x --ep ",
                  ep, " x --sp ", sp, " x --tp ", tp, " = ", model, " does not divide ", world_size,
                  ", so --dp cannot be inferred");
    s.dp = world_size / model;
  }
  TESSERA_CHECK(s.dp * model == world_size, "the layout does not fit ", world_size, " ranks: --pp ", pp,
                " x --dp ", s.dp, " x --ep ", ep, " x --sp ", sp, " x --tp ", tp, " = ", s.dp * model);
  return s;
}

std::array<int, kAxes> ProcessMesh::coords_of(const MeshShape& shape, int rank) {
  std::array<int, kAxes> c{};
  for (int a = kAxes - 1; a >= 0; --a) {  // tp varies fastest
    const int n = shape.size(static_cast<Axis>(a));
    c[a] = rank % n;
    rank /= n;
  }
  return c;
}

int ProcessMesh::rank_of(const MeshShape& shape, const std::array<int, kAxes>& coords) {
  int rank = 0;
  for (int a = 0; a < kAxes; ++a) rank = rank * shape.size(static_cast<Axis>(a)) + coords[a];
  return rank;
}

ProcessMesh::ProcessMesh(const MeshShape& shape, MPI_Comm world) {
  MPI_Comm_rank(world, &world_rank_);
  MPI_Comm_size(world, &world_size_);
  shape_ = shape.resolved(world_size_);
  coords_ = coords_of(shape_, world_rank_);
  world_ = std::make_unique<Communicator>(world, "world");
  for (int a = 0; a < kAxes; ++a) {
    // Ranks sharing every other coordinate form the group of axis a; ordered by coordinate a.
    std::array<int, kAxes> key = coords_;
    key[a] = 0;
    MPI_Comm_split(world, rank_of(shape_, key), coords_[a], &comms_[a]);
    groups_[a] = std::make_unique<Communicator>(comms_[a], axis_name(static_cast<Axis>(a)));
  }
  // dp x sp: the ranks that differ only in their dp and sp coordinates, ordered dp-major.
  std::array<int, kAxes> key = coords_;
  key[static_cast<int>(Axis::dp)] = key[static_cast<int>(Axis::sp)] = 0;
  const int order = coord(Axis::dp) * shape_.sp + coord(Axis::sp);
  MPI_Comm_split(world, rank_of(shape_, key), order, &data_comm_);
  data_ = std::make_unique<Communicator>(data_comm_, shape_.sp > 1 ? "dp*sp" : "dp");
}

std::vector<Communicator*> ProcessMesh::all_groups() {
  std::vector<Communicator*> all;
  for (auto& g : groups_) all.push_back(g.get());
  all.push_back(data_.get());
  all.push_back(world_.get());
  return all;
}

std::vector<const Communicator*> ProcessMesh::all_groups() const {
  std::vector<const Communicator*> all;
  for (auto& g : groups_) all.push_back(g.get());
  all.push_back(data_.get());
  all.push_back(world_.get());
  return all;
}

ProcessMesh::~ProcessMesh() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& c : comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (data_comm_ != MPI_COMM_NULL) MPI_Comm_free(&data_comm_);
}

}  // namespace tessera::comm
