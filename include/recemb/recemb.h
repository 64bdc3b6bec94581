// The whole public API of recemb.
#ifndef RECEMB_RECEMB_H_
#define RECEMB_RECEMB_H_

#include "recemb/batch.h"
#include "recemb/checkpoint.h"
#include "recemb/combiner.h"
#include "recemb/communicator.h"
#include "recemb/config.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/executor.h"
#include "recemb/initializer.h"
#include "recemb/learning_rate.h"
#include "recemb/optimizer.h"
#include "recemb/placement.h"
#include "recemb/publish.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

#endif  // RECEMB_RECEMB_H_
