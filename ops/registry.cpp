// Every op family registers its forward/backward pairs here, once. To see them all at run
// time: std::cout << tg::registry().table();
#include "registry.h"

#include "../framework/inplace.h"
#include "../framework/views.h"

namespace tg {

// Each family's registration lives beside its kernels.
void register_elementwise_ops(Registry& r);
void register_binary_math_ops(Registry& r);
void register_matmul_ops(Registry& r);
void register_reduce_ops(Registry& r);
void register_activation_ops(Registry& r);
void register_unary_ops(Registry& r);
void register_softmax_ops(Registry& r);
void register_cross_entropy_ops(Registry& r);
void register_loss_ops(Registry& r);
void register_norm_ops(Registry& r);
void register_dropout_ops(Registry& r);
void register_embedding_ops(Registry& r);
void register_shape_ops(Registry& r);
void register_index_ops(Registry& r);
void register_minmax_ops(Registry& r);
void register_var_ops(Registry& r);
void register_where_ops(Registry& r);
void register_ms_deform_attn_ops(Registry& r);
void register_conv_ops(Registry& r);
void register_group_norm_ops(Registry& r);
void register_batch_norm_ops(Registry& r);
void register_upsample_ops(Registry& r);
void register_upsample_mode_ops(Registry& r);
void register_grid_sample_ops(Registry& r);
void register_pool_ops(Registry& r);
void register_pad_ops(Registry& r);
void register_adaptive_pool_ops(Registry& r);
void register_upsample_nearest_ops(Registry& r);

namespace {
Registry& build_builtin_registry() {
  static Registry r;
  for (const OpDef* op : view_op_defs()) r.add(*op);
  for (const OpDef* op : inplace_op_defs()) r.add(*op);
  register_elementwise_ops(r);
  register_binary_math_ops(r);
  register_matmul_ops(r);
  register_reduce_ops(r);
  register_activation_ops(r);
  register_unary_ops(r);
  register_softmax_ops(r);
  register_cross_entropy_ops(r);
  register_loss_ops(r);
  register_norm_ops(r);
  register_dropout_ops(r);
  register_embedding_ops(r);
  register_shape_ops(r);
  register_index_ops(r);
  register_minmax_ops(r);
  register_var_ops(r);
  register_where_ops(r);
  register_ms_deform_attn_ops(r);
  register_conv_ops(r);
  register_group_norm_ops(r);
  register_batch_norm_ops(r);
  register_upsample_ops(r);
  register_upsample_mode_ops(r);
  register_grid_sample_ops(r);
  register_pool_ops(r);
  register_pad_ops(r);
  register_adaptive_pool_ops(r);
  register_upsample_nearest_ops(r);
  return r;
}
}  // namespace

Registry& registry() {
  static Registry& r = build_builtin_registry();
  return r;
}

}  // namespace tg
