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

TpMode parse_tp_mode(const std::string& name) {
  if (name == "1d") return TpMode::d1;
  if (name == "2d") return TpMode::d2;
  if (name == "2.5d") return TpMode::d25;
  if (name == "3d") return TpMode::d3;
  throw Error("--tp-mode " + name + ": expected 1d, 2d, 2.5d or 3d");
}

const char* tp_mode_name(TpMode mode) {
  static const char* names[] = {"1d", "2d", "2.5d", "3d"};
  return names[static_cast<int>(mode)];
}

namespace {
int integer_root(int n, int power) {
  int r = 1;
  while (true) {
    int64_t p = 1;
    for (int i = 0; i < power; ++i) p *= r + 1;
    if (p > n) return r;
    ++r;
  }
}

// The valid --tp sizes of a mode up to 64, for the error message.
std::string valid_sizes(TpMode mode, int depth) {
  std::string list;
  for (int q = 1; q <= 8; ++q) {
    const int n = mode == TpMode::d3 ? q * q * q : (mode == TpMode::d25 ? depth : 1) * q * q;
    if (n <= 64) list += (list.empty() ? "" : ", ") + std::to_string(n);
  }
  return list;
}
}  // namespace

int MeshShape::tp_side() const {
  TESSERA_CHECK(tp_depth >= 1 && (tp_mode == TpMode::d25 || tp_depth == 1), "--tp-depth ", tp_depth,
                " needs --tp-mode 2.5d (and is at least 1)");
  if (tp_mode == TpMode::d1) return 1;
  const int power = tp_mode == TpMode::d3 ? 3 : 2;
  const int per_layer = tp_mode == TpMode::d25 ? tp / tp_depth : tp;
  const int q = integer_root(per_layer, power);
  int64_t size = q;
  for (int i = 1; i < power; ++i) size *= q;
  const char* shape = tp_mode == TpMode::d3 ? "q^3" : tp_mode == TpMode::d25 ? "d x q^2" : "q^2";
  TESSERA_CHECK(tp % (tp_mode == TpMode::d25 ? tp_depth : 1) == 0 && size * (tp_mode == TpMode::d25 ? tp_depth : 1) == tp,
                "--tp ", tp, " does not fit --tp-mode ", tp_mode_name(tp_mode),
                tp_mode == TpMode::d25 ? " --tp-depth " + std::to_string(tp_depth) : std::string(), ": it needs --tp = ",
                shape, ", one of ", valid_sizes(tp_mode, tp_depth));
  return q;
}

int MeshShape::tp_batch_parts() const {
  if (tp_mode == TpMode::d1) return 1;
  const int q = tp_side();
  return tp_mode == TpMode::d3 ? q * q : tp / q;
}

TpGrid MeshShape::tp_grid(int t) const {
  TpGrid g;
  if (tp_mode == TpMode::d1) return g;
  const int q = tp_side();
  g.q = q;
  g.depth = tp / (q * q);
  g.col = t % q;
  g.row = t / q % q;
  g.layer = t / (q * q);
  g.cube = tp_mode == TpMode::d3;
  return g;
}

int MeshShape::tp_feature_parts() const { return tp_mode == TpMode::d1 ? tp : tp_side(); }

std::string MeshShape::str() const {
  std::string s = "pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) + " ep=" + std::to_string(ep) +
                  " sp=" + std::to_string(sp) + " tp=" + std::to_string(tp);
  if (tp_mode != TpMode::d1) s += std::string(" (") + tp_mode_name(tp_mode) + ")";
  return s;
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
  s.tp_side();  // checks tp against the mode
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
  make_grid_groups();
}

void ProcessMesh::make_grid_groups() {
  const int q = shape_.tp_side(), t = coord(Axis::tp);
  const bool grid = shape_.tp_mode != TpMode::d1;
  if (grid) grid_ = shape_.tp_grid(t);
  // (color, key) inside the tp group: the ranks sharing a color form the group, ordered by key
  // (under 1d every grid group is this rank alone).
  const int row = grid_.row, col = grid_.col, layer = grid_.layer;
  const std::array<std::pair<int, int>, 5> split{{{layer * q + row, col},    // row: varies col
                                                  {layer * q + col, row},    // col: varies row
                                                  {row * q + col, layer},    // depth: varies layer
                                                  {col, layer * q + row},    // batch: varies layer, row
                                                  {layer, row * q + col}}};  // plane: varies row, col
  static const char* names[] = {"tp_row", "tp_col", "tp_depth", "tp_batch", "tp_plane"};
  for (int g = 0; g < 5; ++g) {
    MPI_Comm_split(comms_[static_cast<int>(Axis::tp)], grid ? split[g].first : t, grid ? split[g].second : 0,
                   &grid_comms_[g]);
    grid_groups_[g] = std::make_unique<Communicator>(grid_comms_[g], names[g]);
  }
}

std::vector<Communicator*> ProcessMesh::all_groups() {
  std::vector<Communicator*> all;
  for (auto& g : groups_) all.push_back(g.get());
  for (auto& g : grid_groups_) all.push_back(g.get());
  all.push_back(data_.get());
  all.push_back(world_.get());
  return all;
}

std::vector<const Communicator*> ProcessMesh::all_groups() const {
  std::vector<const Communicator*> all;
  for (auto& g : groups_) all.push_back(g.get());
  for (auto& g : grid_groups_) all.push_back(g.get());
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
  for (MPI_Comm& c : grid_comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

int64_t ProcessMesh::batch_ranks() const {
  return static_cast<int64_t>(shape_.dp) * shape_.ep * grid_.batch_parts();
}

double ProcessMesh::sum_batch_shares(double value, bool across_stages) {
  for (Communicator* g : {data_.get(), &group(Axis::ep), &grid_rows(), across_stages ? &group(Axis::pp) : nullptr})
    if (g && g->size() > 1) value = g->all_reduce_sum(value);
  return value;
}

ProcessMesh::PartialGradientGroups ProcessMesh::partial_gradient_groups() {
  if (shape_.tp_mode == TpMode::d1) return {};
  return {&grid_rows(), &grid_group(GridGroup::batch), &grid_group(grid_.cube ? GridGroup::row : GridGroup::depth)};
}

}  // namespace tessera::comm
