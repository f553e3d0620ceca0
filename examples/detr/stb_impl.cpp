// stb's single-header libraries keep their implementation behind a macro: it is compiled here,
// once for the whole demo, and nowhere else.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO  // we only encode to memory; files are written atomically by tapegrad
#include <stb_image_write.h>
